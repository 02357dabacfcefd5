//! Text: tokenization, lexicons, inflection, n-gram language models, word vectors.

pub mod lm;
pub mod ppmi;
pub mod tokenize;
