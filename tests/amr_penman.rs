//! The PENMAN codec against penman 1.3.1 on every AMR fixture, round trips, the reader's
//! accounting, and robustness against arbitrary and mutated input.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use capflow::amr::penman::{encode, parse, parse_many};
use capflow::amr::{Alignment, Graph, Triple};
use capflow::ingest::{penman::read, Row, VecSink};
use proptest::prelude::*;
use serde_json::Value;

/// Every AMR fixture. penman parses every graph in all of them, including the deliberately odd
/// graphs of `amr_utils_test_amrs.txt` (missing id, a cycle, a variable used before its
/// definition), so there is no genuinely broken fixture graph: broken input is covered by
/// `broken_graphs_are_located_and_the_rest_still_printed` and the property tests.
const FIXTURES: [&str; 9] = [
    "amr/little_prince_v3.0.txt",
    "amr/bio_v0.8_dev_isi_aligned.txt",
    "amr/bio_v0.8_test_isi_aligned.txt",
    "amr/bio_v0.8_dev_unaligned.txt",
    "amr/ibm_wiki25.jkaln",
    "amr/smatch_test_input1.txt",
    "amr/smatch_test_input2.txt",
    "amr/amr_utils_test_amrs.txt",
    "amr/amr_utils_test_amrs_jamr.txt",
];

/// penman 1.3.1 over a whole file: one JSON line per graph with id, top, triples and the
/// alignments of `penman.surface` (`[triple, on_role, prefix, indices]`).
const ORACLE: &str = r#"
import json, sys, logging
logging.disable(logging.CRITICAL)
import penman
from penman import surface
def align_list(g):
    out = []
    for kind, table in ((False, surface.alignments(g)), (True, surface.role_alignments(g))):
        for triple, a in table.items():
            out.append([list(triple), kind, a.prefix or "", list(a.indices)])
    return out
with open(sys.argv[1], encoding="utf-8") as f:
    text = f.read()
it = penman.iterdecode(text)
while True:
    try:
        g = next(it)
    except StopIteration:
        break
    except penman.DecodeError as e:
        print(json.dumps({"error": str(e)}))
        break
    print(json.dumps({"id": g.metadata.get("id"), "top": g.top,
                      "triples": [list(t) for t in g.triples], "alignments": align_list(g)}))
"#;

fn oracle_graphs(python: &Path, file: &Path) -> Vec<Value> {
    let out = Command::new(python)
        .arg("-c")
        .arg(ORACLE)
        .arg(file)
        .output()
        .expect("run the oracle python");
    assert!(
        out.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("oracle output is UTF-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("oracle JSON"))
        .collect()
}

/// penman keeps the alignments of the first occurrence of a repeated triple only.
fn first_occurrence_alignments(graph: &Value) -> HashMap<(Value, bool), (String, Value)> {
    let triples = graph["triples"].as_array().expect("triples");
    let mut out = HashMap::new();
    for a in graph["alignments"].as_array().expect("alignments") {
        let index = a["triple"].as_u64().expect("triple index") as usize;
        let triple = &triples[index];
        if triples.iter().position(|t| t == triple) == Some(index) {
            out.entry((triple.clone(), a["on_role"].as_bool().expect("on_role")))
                .or_insert((
                    a["prefix"].as_str().expect("prefix").to_string(),
                    a["indices"].clone(),
                ));
        }
    }
    out
}

fn oracle_alignments(graph: &Value) -> HashMap<(Value, bool), (String, Value)> {
    graph["alignments"]
        .as_array()
        .expect("alignments")
        .iter()
        .map(|a| {
            (
                (a[0].clone(), a[1].as_bool().expect("kind")),
                (a[2].as_str().expect("prefix").to_string(), a[3].clone()),
            )
        })
        .collect()
}

#[test]
fn cli_json_matches_penman_on_every_fixture_graph() {
    let (Some(dir), Some(python)) = (common::fixtures_dir(), common::oracle_python()) else {
        return;
    };
    let mut total = 0;
    let sample = common::repo_root().join("examples/data/amr/captions.amr");
    let files = FIXTURES
        .iter()
        .map(|name| (name.to_string(), dir.join(name)))
        .chain([("examples/data/amr/captions.amr".to_string(), sample)]);
    for (name, file) in files {
        let expected = oracle_graphs(&python, &file);
        assert!(
            expected.iter().all(|g| g.get("error").is_none()),
            "{name}: penman failed"
        );
        let out = Command::new(common::capflow_bin())
            .args(["amr", "parse", "--json"])
            .arg(&file)
            .output()
            .expect("run capflow");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ours: Vec<Value> = String::from_utf8(out.stdout)
            .expect("UTF-8")
            .lines()
            .map(|l| serde_json::from_str(l).expect("capflow JSON"))
            .collect();
        assert_eq!(ours.len(), expected.len(), "{name}: graph count");
        for (i, (o, e)) in ours.iter().zip(&expected).enumerate() {
            assert_eq!(
                o["triples"],
                e["triples"],
                "{name} graph {}: triples",
                i + 1
            );
            assert_eq!(o["top"], e["top"], "{name} graph {}: top", i + 1);
            assert_eq!(o["id"], e["id"], "{name} graph {}: id", i + 1);
            assert_eq!(
                first_occurrence_alignments(o),
                oracle_alignments(e),
                "{name} graph {}: alignments",
                i + 1
            );
        }
        eprintln!("{name}: {} graphs agree with penman 1.3.1", ours.len());
        total += ours.len();
    }
    assert_eq!(total, 1562 + 500 * 3 + 25 + 3 + 3 + 5 + 1 + 100);
}

#[test]
fn reader_accounts_for_every_graph() {
    let (Some(dir), Some(python)) = (common::fixtures_dir(), common::oracle_python()) else {
        return;
    };
    for name in FIXTURES {
        let file = dir.join(name);
        let expected = oracle_graphs(&python, &file);
        let mut sink = VecSink::default();
        read(&file, &mut sink).expect("read");
        let counts = sink.counts();
        assert_eq!(counts.read, expected.len() as u64, "{name}");
        assert_eq!(counts.accepted + counts.rejected, counts.read);
        assert_eq!(counts.rejected, 0, "{name}: {:?}", sink.rejected.first());
        for (row, e) in sink.rows.iter().zip(&expected) {
            let Row::Amr(row) = row else {
                panic!("{name}: not an AMR row")
            };
            // The raw block parses to the oracle's graph on its own.
            let g = parse(&row.penman).expect("raw block parses");
            let triples: Vec<Value> = g
                .triples
                .iter()
                .map(|t| serde_json::json!([t.source, t.role, none_if_empty(&t.target)]))
                .collect();
            assert_eq!(
                Value::from(triples),
                e["triples"],
                "{name}: {}",
                row.graph_id
            );
            if let Some(id) = e["id"].as_str() {
                assert_eq!(row.graph_id, id);
            }
        }
    }
}

fn none_if_empty(s: &str) -> Value {
    if s.is_empty() {
        Value::Null
    } else {
        Value::from(s)
    }
}

#[test]
fn reader_fields_on_bio_and_jamr_fixtures() {
    let Some(dir) = common::fixtures_dir() else {
        return;
    };
    let mut sink = VecSink::default();
    read(&dir.join("amr/bio_v0.8_dev_isi_aligned.txt"), &mut sink).expect("read");
    let Row::Amr(first) = &sink.rows[0] else {
        panic!("not an AMR row")
    };
    assert_eq!(first.graph_id, "a_pmid_2488_5690.10");
    assert_eq!(first.image_id, "a_pmid_2488_5690");
    assert_eq!(first.caption_id.as_deref(), Some("a_pmid_2488_5690#10"));
    assert_eq!(first.alignment_flavour, "isi");
    // 30 tokens: `len(tok.split(" "))` in Python on the `::tok` line.
    assert_eq!(first.tokens.as_ref().map(Vec::len), Some(30));
    assert!(first
        .penman
        .starts_with("# ::id a_pmid_2488_5690.10 ::amr-annotator"));

    let mut sink = VecSink::default();
    read(&dir.join("amr/ibm_wiki25.jkaln"), &mut sink).expect("read");
    let Row::Amr(first) = &sink.rows[0] else {
        panic!("not an AMR row")
    };
    assert_eq!(first.graph_id, "ibm_wiki25.jkaln:1");
    assert_eq!(first.alignment_flavour, "jamr");
    assert_eq!(
        first.sentence.as_deref(),
        Some("The gestation period averages 12 months.")
    );

    let mut sink = VecSink::default();
    read(&dir.join("amr/amr_utils_test_amrs_jamr.txt"), &mut sink).expect("read");
    let Row::Amr(first) = &sink.rows[0] else {
        panic!("not an AMR row")
    };
    assert_eq!(first.alignment_flavour, "jamr");
}

#[test]
fn every_fixture_graph_round_trips_through_encode() {
    let Some(dir) = common::fixtures_dir() else {
        return;
    };
    let mut graphs = 0;
    for name in FIXTURES {
        let text = std::fs::read_to_string(dir.join(name)).expect("fixture");
        for block in parse_many(&text) {
            let g = block.graph.expect("fixture graph parses");
            let encoded = encode(&g);
            assert_eq!(
                parse(&encoded).as_ref(),
                Ok(&g),
                "{name} line {}:\n{encoded}",
                block.line
            );
            graphs += 1;
        }
    }
    assert_eq!(graphs, 1562 + 500 * 3 + 25 + 3 + 3 + 5 + 1);
}

#[test]
fn broken_graphs_are_located_and_the_rest_still_printed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("broken.txt");
    std::fs::write(
        &file,
        "# ::id a.1\n(a / alpha\n   :ARG0 (b / beta)\n\n# ::id a.2\n(c / gamma :ARG1 \"x\")\n\n# ::id a.3\n(d / delta :ARG0 ~e.)\n",
    )
    .expect("write");
    let out = Command::new(common::capflow_bin())
        .args(["amr", "parse", "--json"])
        .arg(&file)
        .output()
        .expect("run capflow");
    assert_eq!(out.status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1);
    assert!(stdout.contains("\"a.2\""));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Graph 1 ends (unclosed) at line 3; graph 3's stray `~` is at line 9, column 18.
    assert!(
        stderr.contains("graph 1 (line 1): line 3, column"),
        "{stderr}"
    );
    assert!(
        stderr.contains("graph 3 (line 8): line 9, column 18"),
        "{stderr}"
    );
}

// ---- property tests ----

/// A random tree written as PENMAN: nested nodes, re-entrancies (to any variable, earlier or
/// later), inverse roles, constants, strings with escapes, missing concepts and alignments.
#[derive(Clone, Debug)]
enum Target {
    Node(Vec<(String, Target)>, Option<String>),
    Reference(usize),
    Constant(String),
}

fn role() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![
            ":ARG0", ":ARG1", ":mod", ":domain", ":consist", ":op1", ":name",
        ]),
        any::<bool>(),
        prop::option::of(0usize..30),
    )
        .prop_map(|(r, inverse, aln)| {
            let mut s = r.to_string();
            if inverse {
                s.push_str("-of");
            }
            if let Some(i) = aln {
                s.push_str(&format!("~e.{i}"));
            }
            s
        })
}

fn constant() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,6}".prop_map(|s| s),
        "[0-9]{1,3}".prop_map(|s| s),
        Just("-".to_string()),
        "[a-zA-Z ~:()]{0,6}".prop_map(|s| format!("\"{s}\"")),
        Just(r#""a\"b""#.to_string()),
    ]
    .prop_flat_map(|c| {
        (Just(c), prop::option::of(0usize..30)).prop_map(|(c, aln)| match aln {
            Some(i) => format!("{c}~{i}"),
            None => c,
        })
    })
}

fn tree() -> impl Strategy<Value = Target> {
    let leaf = prop_oneof![
        (0usize..8).prop_map(Target::Reference),
        constant().prop_map(Target::Constant),
    ];
    leaf.prop_recursive(5, 40, 4, |inner| {
        (
            prop::collection::vec((role(), inner), 0..4),
            prop::option::of("[a-z]{1,5}(-0[1-3])?(~[0-9]{1,2})?"),
        )
            .prop_map(|(edges, concept)| Target::Node(edges, concept))
    })
}

fn write_tree(t: &Target, counter: &mut usize, out: &mut String) {
    match t {
        Target::Node(edges, concept) => {
            let var = format!("v{counter}");
            *counter += 1;
            out.push('(');
            out.push_str(&var);
            if let Some(c) = concept {
                out.push_str(" / ");
                out.push_str(c);
            }
            for (role, target) in edges {
                out.push(' ');
                out.push_str(role);
                out.push(' ');
                write_tree(target, counter, out);
            }
            out.push(')');
        }
        Target::Reference(i) => out.push_str(&format!("v{i}")),
        Target::Constant(c) => out.push_str(c),
    }
}

fn penman_text(edges: Vec<(String, Target)>, concept: Option<String>) -> String {
    let mut out = String::from("# ::id img.3 ::snt a b c\n");
    write_tree(&Target::Node(edges, concept), &mut 0, &mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn generated_graphs_round_trip(
        edges in prop::collection::vec((role(), tree()), 0..5),
        concept in prop::option::of("[a-z]{1,6}(~e\\.[0-9])?"),
    ) {
        let text = penman_text(edges, concept);
        let g = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        let encoded = encode(&g);
        let again = parse(&encoded).map_err(|e| TestCaseError::fail(format!("{e}\n{encoded}")))?;
        prop_assert_eq!(again, g, "{}\n=>\n{}", text, encoded);
    }

    #[test]
    fn arbitrary_text_never_panics(text in "[ -~\\n\\t\\u{2028}é]{0,200}") {
        let _ = parse(&text);
        for block in parse_many(&text) {
            prop_assert!(text[block.byte_offset..].starts_with(&block.text));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_reader(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("x.txt");
        std::fs::write(&file, &bytes).expect("write");
        let mut sink = VecSink::default();
        prop_assert!(read(&file, &mut sink).is_ok());
        prop_assert_eq!(sink.counts().accepted as usize, sink.rows.len());
    }
}

/// Mutated fixture graphs: deleting, duplicating or replacing characters never panics and
/// keeps the split consistent with the text.
#[test]
fn mutated_fixture_graphs_never_panic() {
    let Some(dir) = common::fixtures_dir() else {
        return;
    };
    let text =
        std::fs::read_to_string(dir.join("amr/bio_v0.8_dev_isi_aligned.txt")).expect("fixture");
    let blocks = parse_many(&text);
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = (
        0..blocks.len(),
        prop::collection::vec(
            (
                any::<prop::sample::Index>(),
                0u8..3,
                "[()/:~\"#\\n a-z0-9.]",
            ),
            1..6,
        ),
    );
    runner
        .run(&strategy, |(which, edits)| {
            let mut chars: Vec<char> = blocks[which].text.chars().collect();
            for (at, op, replacement) in edits {
                if chars.is_empty() {
                    break;
                }
                let i = at.index(chars.len());
                let c = replacement.chars().next().unwrap_or(' ');
                match op {
                    0 => {
                        chars.remove(i);
                    }
                    1 => chars.insert(i, chars[i]),
                    _ => chars[i] = c,
                }
            }
            let mutated: String = chars.into_iter().collect();
            if let Ok(g) = parse(&mutated) {
                prop_assert_eq!(parse(&encode(&g)).ok(), Some(g));
            }
            let many = format!("{mutated}\n\n{}", blocks[0].text);
            let split = parse_many(&many);
            prop_assert!(split.last().is_some_and(|b| b.graph.is_ok()));
            Ok(())
        })
        .expect("mutations");
}

#[test]
fn encode_writes_inline_alignments() {
    let g = Graph {
        top: "w".to_string(),
        triples: vec![
            Triple::new("w", ":instance", "want-01"),
            Triple::new("w", ":ARG0", "b"),
            Triple::new("b", ":instance", "boy"),
        ],
        metadata: vec![("id".to_string(), "x.1".to_string())],
        alignments: vec![Alignment {
            triple: 1,
            on_role: true,
            prefix: "e.".to_string(),
            indices: vec![2, 3],
        }],
    };
    let text = encode(&g);
    assert!(text.contains(":ARG0~e.2,3 (b / boy)"), "{text}");
    assert_eq!(parse(&text), Ok(g));
}
