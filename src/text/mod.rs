//! Text: tokenization, lexicons, inflection, n-gram language models, word vectors.

pub mod vectors;

pub use vectors::{cosine, VectorFormat, WordVectors, OOV_SIMILARITY};
