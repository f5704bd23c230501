"""Inspecting a dataset: notebook access (`explore`), the static HTML report (`report`, with its
corpus sections in `report_corpus`, what it reads in `report_data`, how it shows values in
`report_html` and its options in `report_options`) and the review page's local server
(`review_server` and the modules it is split into). Inspection reads the data room and the
folder passes' results; nothing below imports it."""
