//! Unit tests. Expected triples are penman 1.3.1's `decode(text).triples` for the same text
//! (checked by hand with the oracle Python; `None` targets written as `""`).

use super::*;
use crate::amr::graph::{Alignment, Triple};

fn triples(text: &str) -> Vec<(String, String, String)> {
    parse(text)
        .unwrap()
        .triples
        .into_iter()
        .map(|t| (t.source, t.role, t.target))
        .collect()
}

fn t(s: &str, r: &str, x: &str) -> (String, String, String) {
    (s.to_string(), r.to_string(), x.to_string())
}

#[test]
fn inverted_roles_follow_the_default_model() {
    assert_eq!(
        triples(
            r#"(a / b :consist-of (c / d) :mod e :domain-of (f / g) :ARG0-of a :ARG1-of "x" :polarity -)"#
        ),
        vec![
            t("a", ":instance", "b"),
            t("c", ":consist", "a"),
            t("c", ":instance", "d"),
            t("a", ":mod", "e"),
            t("f", ":domain", "a"),
            t("f", ":instance", "g"),
            t("a", ":ARG0", "a"),
            t("a", ":ARG1-of", "\"x\""),
            t("a", ":polarity", "-"),
        ]
    );
}

#[test]
fn inverted_reference_to_a_later_variable_is_turned_around() {
    assert_eq!(
        triples("(a / x :ARG0-of b :ARG1 (b / y))"),
        vec![
            t("a", ":instance", "x"),
            t("b", ":ARG0", "a"),
            t("a", ":ARG1", "b"),
            t("b", ":instance", "y"),
        ]
    );
}

#[test]
fn missing_concepts_and_targets() {
    assert_eq!(
        triples("(a / :ARG0 b)"),
        vec![t("a", ":instance", ""), t("a", ":ARG0", "b")]
    );
    assert_eq!(
        triples("(a / x :ARG0 :ARG1 c)"),
        vec![
            t("a", ":instance", "x"),
            t("a", ":ARG0", ""),
            t("a", ":ARG1", "c")
        ]
    );
    assert_eq!(
        triples("(a :ARG0 (b / c) :instance foo)"),
        vec![
            t("a", ":ARG0", "b"),
            t("b", ":instance", "c"),
            t("a", ":instance", "foo")
        ]
    );
}

#[test]
fn alignments_and_metadata() {
    let g = parse("# ::id a ::b c ::d\n# ::id z\n(a / b~e3,4 :ARG0~e.1 (c / \"d e\"~7))").unwrap();
    assert_eq!(
        g.triples,
        vec![
            Triple::new("a", ":instance", "b"),
            Triple::new("a", ":ARG0", "c"),
            Triple::new("c", ":instance", "\"d e\""),
        ]
    );
    let a = |triple, on_role, prefix: &str, indices: Vec<usize>| Alignment {
        triple,
        on_role,
        prefix: prefix.to_string(),
        indices,
    };
    assert_eq!(
        g.alignments,
        vec![
            a(0, false, "e", vec![3, 4]),
            a(1, true, "e.", vec![1]),
            a(2, false, "", vec![7]),
        ]
    );
    assert_eq!(g.id(), Some("a"));
    assert_eq!(g.metadata.len(), 4);
    assert_eq!(alignment_flavour(&g), AlignmentFlavour::Isi);
}

#[test]
fn strings_keep_quotes_escapes_and_tildes() {
    assert_eq!(
        triples(r#"(a / x :op1 "a~b" :op2 "c\"d"~1)"#),
        vec![
            t("a", ":instance", "x"),
            t("a", ":op1", "\"a~b\""),
            t("a", ":op2", r#""c\"d""#)
        ]
    );
}

#[test]
fn errors_are_located() {
    let e = parse("(a / x\n:ARG0 (b / c").unwrap_err();
    assert_eq!((e.line, e.column), (2, 13));
    let e = parse("(n2~2 / x)").unwrap_err();
    assert_eq!((e.line, e.column), (1, 4));
    let e = parse("(a / x #comment\n :ARG0 b)").unwrap_err();
    assert_eq!((e.line, e.column), (1, 8));
    assert_eq!(e.to_string(), format!("line 1, column 8: {}", e.message));
    assert!(parse("()").is_err());
    assert!(parse("(a / b))").is_err());
    assert!(parse("# only a comment").is_err());
    assert!(parse("").is_err());
    assert!(parse(&"(a :ARG0 ".repeat(MAX_DEPTH + 5)).is_err());
}

#[test]
fn encode_round_trips_odd_layouts() {
    for text in [
        "(a / x :ARG0 (b / y :ARG1 c) :ARG2 b)",
        "(a :ARG0 (b / c) :instance foo)",
        "(a / x :ARG0 :ARG1 c~2 :ARG2~e.4 \"s\"~e.5)",
        "(t :X-of-of s :ARG0 (s / z))",
        "(a / x :ARG0-of (b / y :ARG1-of a) :mod-of c)",
        "# ::id 1 ::snt hi there\n# ::preferred\n(a / \"q\" :polarity -)",
    ] {
        let g = parse(text).unwrap();
        let encoded = encode(&g);
        assert_eq!(parse(&encoded).unwrap(), g, "{text}\n=> {encoded}");
    }
}

#[test]
fn isi_tree_alignments_resolve_to_triples() {
    // Tree positions count every edge, re-entrant references included (ISI convention).
    let text = "# ::alignments 0-1 1-1.1.r 2-1.2.1 3-1.3\n(a / and :op1 b :op2 (c / cat :mod \"x\") :op3 (b / big))";
    let (g, meta) = parse_with_alignment_metadata(text).unwrap();
    let resolved: Vec<_> = meta
        .alignments
        .iter()
        .map(|a| {
            (
                a.tokens.clone(),
                a.triple.map(|i| g.triples[i].clone()),
                a.on_role,
            )
        })
        .collect();
    assert_eq!(
        resolved,
        vec![
            (vec![0], Some(Triple::new("a", ":instance", "and")), false),
            (vec![1], Some(Triple::new("a", ":op1", "b")), true),
            (vec![2], Some(Triple::new("c", ":mod", "\"x\"")), false),
            (vec![3], Some(Triple::new("b", ":instance", "big")), false),
        ]
    );
}

#[test]
fn jamr_alignments_skip_reentrancies() {
    // The amr-utils test graph: `:ARG0 b` inside `g` is not counted, so `c` is 0.1.0.
    let text = "# ::alignments 1-2|0.0 6-8|0.1.0+0.1.0.0.1\n# ::node\t0.1.0\tcity\t6-8\n# ::edge\twant-01\tARG1\tgo-02\t0\t0.1\n# ::root\t0\twant-01\n(w / want-01 :ARG0 (b / boy)\n :ARG1 (g / go-02 :ARG0 b\n :ARG4 (c / city :name (n / name :op1 \"New\" :op2 \"York\"))))";
    let (g, meta) = parse_with_alignment_metadata(text).unwrap();
    let concept = |a: &MetadataAlignment| a.triple.map(|i| g.triples[i].target.clone());
    let got: Vec<_> = meta
        .alignments
        .iter()
        .map(|a| (a.tokens.clone(), concept(a)))
        .collect();
    assert_eq!(
        got,
        vec![
            (vec![1], Some("boy".to_string())),
            (vec![6, 7], Some("city".to_string())),
            (vec![6, 7], Some("\"York\"".to_string())),
            (vec![6, 7], Some("city".to_string())),
        ]
    );
    assert_eq!(meta.edges.len(), 1);
    assert_eq!(
        meta.edges[0].triple.map(|i| g.triples[i].clone()),
        Some(Triple::new("w", ":ARG1", "g"))
    );
    assert_eq!(meta.root, Some((vec![0], Some(0))));
    assert_eq!(alignment_flavour(&g), AlignmentFlavour::Jamr);
}

#[test]
fn unreadable_alignment_metadata_is_located() {
    let e = parse_with_alignment_metadata("# ::id 1\n# ::alignments 0-x\n(a / b)").unwrap_err();
    assert_eq!(e.line, 2);
}

#[test]
fn parse_many_recovers_and_locates() {
    let text = "# header\n\n# ::id 1\n(a / b\n\n# ::id 2\n(c / d)\n";
    let blocks = parse_many(text);
    assert_eq!(blocks.len(), 2);
    let err = blocks[0].graph.as_ref().unwrap_err();
    assert_eq!(err.line, 4);
    assert_eq!(blocks[1].line, 6);
    assert_eq!(
        &text[blocks[1].byte_offset..][..blocks[1].text.len()],
        blocks[1].text
    );
    assert_eq!(blocks[1].graph.as_ref().unwrap().id(), Some("2"));
}
