"""Pipeline stages: one module each, each with one method, none of them aware of Ray."""
