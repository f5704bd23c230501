"""How a source holds its pictures, and giving the stages the film's true frames: the field
structure (`fields`: the comb measure and the combing clip stage; `field_pass`: the film pass that
tells progressive, telecined, interlaced and hybrid apart; `field_restore`: field matching,
decimation and deinterlacing as the segments decode), field-coded H.264 streams' frames
(`field_coding`), and the film's sampled frames that the crop, overlay and field passes share
(`film_samples`)."""
