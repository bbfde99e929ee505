"""Inference: ELBO objectives, the training loop, and continual learners."""
