"""How a source holds its pictures, and giving the stages the film's true frames: the field
structure (`fields`: the comb measure and the combing clip stage; `field_pass`: the film pass that
tells progressive, telecined, interlaced and hybrid apart; `field_restore`: field matching,
decimation and deinterlacing as the segments decode), field-coded H.264 streams' frames
(`field_coding`), the film's sampled frames that the crop, overlay and field passes share
(`film_samples`), and the dark strips around a DVD's active picture that the crop takes away
(`edge_strips`)."""
