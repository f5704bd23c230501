"""Pipeline stages, one module each (the captioning stage is a package), none of them aware of
Ray: the contracts and the clip stage registry are in stages/base.py."""
