//! One caption per construction, each with the AMR an annotator following the AMR guidelines
//! would write for it (hand-written here, not produced by the parser); a test passes when the
//! parse has every triple of the expected graph and no other (Smatch F = 1).

use super::*;
use crate::amr::penman::{encode, parse};
use crate::amr::smatch::{smatch, SmatchOptions};

#[track_caller]
fn parses_as(caption: &str, expected: &str) {
    let parsed = parse_caption(caption);
    let gold = parse(expected).expect("the expected graph is valid PENMAN");
    let score = smatch(&parsed, &gold, &SmatchOptions::default());
    assert!(
        (score.f1() - 1.0).abs() < 1e-9,
        "{caption}\nparsed (F {:.3}):\n{}\nexpected:\n{expected}",
        score.f1(),
        encode(&parsed)
    );
}

#[test]
fn determiners_numbers_and_adjectives() {
    parses_as("Three small dogs .", "(d / dog :quant 3 :mod (s / small))");
    parses_as("An old man .", "(m / man :mod (o / old))");
}

#[test]
fn colours_are_frames_where_amr_has_one() {
    parses_as("A red ball .", "(b / ball :ARG1-of (r / red-02))");
    parses_as("A brown horse .", "(h / horse :mod (b / brown))");
}

#[test]
fn compounds_and_possessives() {
    parses_as("A soccer ball .", "(b / ball :mod (s / soccer))");
    parses_as(
        "The girl's dog runs .",
        "(r / run-02 :ARG0 (d / dog :poss (g / girl)))",
    );
    parses_as(
        "A boy rides his bike .",
        "(r / ride-01 :ARG0 (b / boy) :ARG1 (b2 / bike :poss b))",
    );
}

#[test]
fn subject_verb_object() {
    parses_as(
        "A boy kicks a ball .",
        "(k / kick-01 :ARG0 (b / boy) :ARG1 (b2 / ball))",
    );
    // A plural subject takes the plain form, which is also a noun.
    parses_as(
        "Two men fish from a boat .",
        "(f / fish-01 :ARG0 (m / man :quant 2) :source (b / boat))",
    );
    parses_as(
        "A woman is cutting vegetables .",
        "(c / cut-01 :ARG0 (w / woman) :ARG1 (v / vegetable))",
    );
}

#[test]
fn prepositional_phrases_and_locations() {
    parses_as(
        "A cat sleeps on a couch .",
        "(s / sleep-01 :ARG0 (c / cat) :location (c2 / couch))",
    );
    parses_as(
        "A man on a bench reads a newspaper .",
        "(r / read-01 :ARG0 (m / man :location (b / bench)) :ARG1 (n / newspaper))",
    );
    parses_as(
        "A dog runs across the field .",
        "(r / run-02 :ARG0 (d / dog) :path (a / across :op1 (f / field)))",
    );
    parses_as(
        "A girl sits next to a tree .",
        "(s / sit-01 :ARG1 (g / girl) :location (n / next-to :op1 (t / tree)))",
    );
}

#[test]
fn participles() {
    parses_as(
        "A man wearing a hat .",
        "(m / man :ARG0-of (w / wear-01 :ARG1 (h / hat)))",
    );
    parses_as(
        "A frisbee thrown by a boy .",
        "(f / frisbee :ARG1-of (t / throw-01 :ARG0 (b / boy)))",
    );
    parses_as("Parked cars .", "(c / car :ARG1-of (p / park-01))");
    parses_as(
        "A man in a red shirt .",
        "(m / man :ARG0-of (w / wear-01 :ARG1 (s / shirt :ARG1-of (r / red-02))))",
    );
}

#[test]
fn relative_clauses() {
    parses_as("A dog that runs .", "(d / dog :ARG0-of (r / run-02))");
    parses_as(
        "A woman who holds an umbrella .",
        "(w / woman :ARG0-of (h / hold-01 :ARG1 (u / umbrella)))",
    );
}

#[test]
fn coordination() {
    parses_as(
        "A dog and a cat sleep .",
        "(s / sleep-01 :ARG0 (a / and :op1 (d / dog) :op2 (c / cat)))",
    );
    parses_as(
        "A man sings and plays a guitar .",
        "(a / and :op1 (s / sing-01 :ARG0 (m / man)) :op2 (p / play-01 :ARG0 m :ARG1 (g / guitar)))",
    );
}

#[test]
fn there_is_and_copula() {
    parses_as(
        "There are two dogs on the grass .",
        "(d / dog :quant 2 :location (g / grass))",
    );
    parses_as("The dog is happy .", "(h / happy-01 :ARG1 (d / dog))");
    parses_as("The man is tall .", "(t / tall :domain (m / man))");
    parses_as(
        "The cat is on the table .",
        "(c / cat :location (t / table))",
    );
}

#[test]
fn agentive_nouns() {
    parses_as(
        "A teacher reads a book .",
        "(r / read-01 :ARG0 (p / person :ARG0-of (t / teach-01)) :ARG1 (b / book))",
    );
    parses_as(
        "A basketball player jumps .",
        "(j / jump-03 :ARG0 (p / person :ARG0-of (p2 / play-01 :ARG1 (b / basketball))))",
    );
}

#[test]
fn purpose_and_time_clauses() {
    parses_as(
        "A dog jumps to catch a frisbee .",
        "(j / jump-03 :ARG0 (d / dog) :purpose (c / catch-01 :ARG0 d :ARG1 (f / frisbee)))",
    );
    parses_as(
        "A boy kicks the ball while his friends watch .",
        "(k / kick-01 :ARG0 (b / boy) :ARG1 (b2 / ball)
            :time (w / watch-01 :ARG0 (p / person :ARG0-of (h / have-rel-role-91
                :ARG1 b :ARG2 (f / friend)))))",
    );
}

#[test]
fn every_concept_is_aligned_to_its_token() {
    let g = parse_caption("A cyclist wearing a red helmet rides next to parked cars .");
    assert_eq!(
        g.meta("tok"),
        Some("A cyclist wearing a red helmet rides next to parked cars .")
    );
    let text = encode(&g);
    for mark in [
        "person~e.1",
        "cycle-01~e.1",
        "wear-01~e.2",
        "red-02~e.4",
        "helmet~e.5",
        "ride-01~e.6",
        "next-to~e.7",
        "park-01~e.9",
        "car~e.10",
    ] {
        assert!(text.contains(mark), "{mark} missing in\n{text}");
    }
    let instances = g.triples.iter().filter(|t| t.is_instance()).count();
    let aligned = g
        .alignments
        .iter()
        .filter(|a| g.triples[a.triple].is_instance())
        .count();
    assert_eq!(aligned, instances);
}

#[test]
fn numbers_are_aligned_constants() {
    let text = encode(&parse_caption("Two dogs run ."));
    assert!(text.contains(":quant 2~e.0"), "{text}");
}

#[test]
fn captions_without_content_give_empty_graphs() {
    assert!(parse_caption("").triples.is_empty());
    assert!(parse_caption(" . , !").triples.is_empty());
    assert!(parse_caption("the a of").triples.is_empty());
}

#[test]
fn hyphenated_words_stay_one_concept() {
    let text = encode(&parse_caption("A gray-haired man ."));
    assert!(text.contains("gray-haired~e.1"), "{text}");
}
