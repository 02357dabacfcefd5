//! Text: tokenization, lexicons, inflection, n-gram language models, word vectors.
