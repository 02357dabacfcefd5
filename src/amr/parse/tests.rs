use super::*;
use crate::amr::penman::encode;

fn show(text: &str) -> String {
    encode(&parse_caption(text))
}

#[test]
fn smoke() {
    for s in [
        "A young man rides a bicycle down a city street .",
        "A cyclist wearing a red helmet rides next to parked cars .",
    ] {
        println!("{}", show(s));
    }
}
