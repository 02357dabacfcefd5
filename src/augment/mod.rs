//! The augmentation methods as pure functions from one image's annotations to samples.
