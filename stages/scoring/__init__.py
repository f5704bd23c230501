"""The scores users filter and balance by (issue 36): how a score is declared, shown, filtered and
thresholded (`scores`), camera motion from the motion stage's flow (`camera`), clarity (`clarity`),
and the CLIP pass: the embedding code shared with the trainer's CLIP-I/CLIP-T (`clip_model`), the
LAION aesthetic head (`aesthetic`) and the clip stage that fills embedding, aesthetic score and
caption match (`clip_scores`)."""
