//! Text: tokenization, lexicons, inflection, n-gram language models, word vectors.

mod gram;
pub mod inflect;
pub(crate) mod interner;
pub mod lm;
pub mod ppmi;
pub mod tokenize;
pub mod vectors;

pub use vectors::{cosine, VectorFormat, WordVectors, OOV_SIMILARITY};
