"""What was burned into the picture on top of the film: subtitle bands and logos found by the film
pass (`overlays`, with `logos` and the text-line helpers of `overlays_text`), rare text at a
clip's top and bottom edge (`edge_text`), a web player's bar (`player_bars`), and the rule that
leaves in-world text (a sign that moves with the picture) out of the text measure
(`in_world_text`); the text detector all of them and the quality stage run (`text_detector`)."""
