//! Caption metrics: BLEU, CIDEr-D, self-CIDEr, D-n, content IoU, hallucination, length control.
