//! `capflow synth`: determinism, prefix stability, and that the crate's readers take the
//! synthetic data whole, with captions, groundings, boxes, aligned AMRs and detections that agree
//! and a Flickr30k-like size distribution (documented in `docs/synth.md`).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use capflow::amr::penman::parse;
use capflow::ingest::{coco, flickr30k, penman, visual_genome, Row, VecSink};
use capflow::synth::{write_dataset, SynthConfig};

fn synth(images: u64, seed: u64) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("synth");
    let config = SynthConfig {
        images,
        seed,
        captions_per_image: 5,
        render: false,
    };
    let counts = write_dataset(&config, &out).unwrap();
    assert_eq!(counts.images, images);
    (tmp, out)
}

/// Every file under `dir`, relative path → bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    common::files_under(dir)
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (path.strip_prefix(dir).unwrap().to_path_buf(), bytes)
        })
        .collect()
}

#[test]
fn same_seed_gives_the_same_bytes_and_other_seeds_differ() {
    let (_a, a) = synth(30, 7);
    let (_b, b) = synth(30, 7);
    let (_c, c) = synth(30, 8);
    let (fa, fb, fc) = (files(&a), files(&b), files(&c));
    assert_eq!(fa.len(), 30 * 2 + 3 + 4);
    assert!(fa == fb, "same seed, different bytes");
    let sentences = |f: &BTreeMap<PathBuf, Vec<u8>>| {
        f.iter()
            .filter(|(p, _)| p.starts_with("flickr30k_entities/Sentences"))
            .map(|(_, b)| b.clone())
            .collect::<Vec<_>>()
    };
    let (sa, sc) = (sentences(&fa), sentences(&fc));
    let differing = sa.iter().zip(&sc).filter(|(x, y)| x != y).count();
    assert!(differing >= 25, "only {differing} of 30 images differ");
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn a_larger_run_starts_with_the_smaller_run() {
    let (_s, small) = synth(30, 11);
    let (_l, large) = synth(50, 11);
    let (fs, fl) = (files(&small), files(&large));
    for (rel, bytes) in &fs {
        let name = rel.to_string_lossy();
        if name.contains("Sentences") || name.contains("Annotations") {
            assert!(fl.get(rel) == Some(bytes), "{name} differs");
        }
    }
    let per_image_files = fl
        .keys()
        .filter(|p| p.to_string_lossy().contains("Sentences"))
        .count();
    assert_eq!(per_image_files, 50);
    // The AMR file of the small run is a byte prefix of the large run's.
    let (amr_s, amr_l) = (
        &fs[Path::new("amr/captions.amr")],
        &fl[Path::new("amr/captions.amr")],
    );
    assert!(amr_l.len() > amr_s.len() && amr_l.starts_with(amr_s));
    // Each split list of the small run is a prefix of the large run's.
    for split in ["train", "val", "test"] {
        let rel = PathBuf::from(format!("flickr30k_entities/{split}.txt"));
        assert!(fl[&rel].starts_with(&fs[&rel]), "{split}.txt");
    }
    // The detections of the first 30 images are the same records.
    let (js, jl) = (
        json(&small.join("detections/instances.json")),
        json(&large.join("detections/instances.json")),
    );
    let first_30 = |v: &serde_json::Value, key: &str, id_key: &str| {
        v[key]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r[id_key].as_u64().unwrap() < 2_000_030)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(js["images"].as_array().unwrap().len(), 30);
    assert_eq!(first_30(&js, "images", "id"), first_30(&jl, "images", "id"));
    let ann_s = first_30(&js, "annotations", "image_id");
    assert_eq!(ann_s.len(), js["annotations"].as_array().unwrap().len());
    assert_eq!(ann_s, first_30(&jl, "annotations", "image_id"));
    assert_eq!(js["categories"], jl["categories"]);
    // So are the scene graphs and image data.
    for file in ["scene_graphs.json", "image_data.json"] {
        let (vs, vl) = (
            json(&small.join("visual_genome").join(file)),
            json(&large.join("visual_genome").join(file)),
        );
        let (vs, vl) = (vs.as_array().unwrap(), vl.as_array().unwrap());
        assert_eq!((vs.len(), vl.len()), (30, 50));
        assert_eq!(vs[..], vl[..30], "{file}");
    }
}

/// Irregular plurals and forms the generator's lexicon uses, written out by hand.
const IRREGULAR: &[(&str, &str)] = &[
    ("man", "men"),
    ("woman", "women"),
    ("child", "children"),
    ("person", "people"),
    ("lady", "ladies"),
    ("puppy", "puppies"),
    ("pony", "ponies"),
    ("carry", "carries"),
];

/// Whether `token` is `lemma` or a regular inflection of it (plural, third person, -ing with
/// or without a dropped `e` or a doubled consonant).
fn is_form_of(token: &str, lemma: &str) -> bool {
    let token = token.to_lowercase();
    if token == lemma || IRREGULAR.contains(&(lemma, token.as_str())) {
        return true;
    }
    let stem_e = lemma.strip_suffix('e').unwrap_or(lemma);
    let last = lemma.chars().last().unwrap_or(' ');
    let forms = [
        format!("{lemma}s"),
        format!("{lemma}es"),
        format!("{lemma}ing"),
        format!("{stem_e}ing"),
        format!("{lemma}{last}ing"),
    ];
    forms.contains(&token)
}

fn concept_lemma(concept: &str) -> &str {
    match concept.rsplit_once('-') {
        Some((lemma, sense)) if sense.chars().all(|c| c.is_ascii_digit()) => lemma,
        _ => concept,
    }
}

struct Read {
    rows: Vec<Row>,
    rejected: usize,
}

fn read_all(dir: &Path) -> Read {
    let mut sink = VecSink::default();
    flickr30k::read(&dir.join("flickr30k_entities"), &mut sink).unwrap();
    penman::read(&dir.join("amr/captions.amr"), &mut sink).unwrap();
    coco::read_instances(&dir.join("detections/instances.json"), &mut sink).unwrap();
    visual_genome::read(&dir.join("visual_genome"), &mut sink).unwrap();
    Read {
        rejected: sink.rejected.len(),
        rows: sink.rows,
    }
}

#[test]
fn readers_take_the_data_whole_and_its_parts_agree() {
    let images = 400;
    let (_t, dir) = synth(images, 5);
    let read = read_all(&dir);
    assert_eq!(read.rejected, 0);
    let mut sizes = HashMap::new();
    let mut splits = HashMap::new();
    let mut captions = BTreeMap::new();
    let mut amrs: HashMap<String, Vec<String>> = HashMap::new();
    let mut amr_tokens = HashMap::new();
    let mut phrases_per_caption: HashMap<String, usize> = HashMap::new();
    let mut detections = 0;
    let mut coco_sizes = HashMap::new();
    let mut vg_sizes = HashMap::new();
    let mut scene_graphs = Vec::new();
    let mut groundings = Vec::new();
    for row in &read.rows {
        match row {
            Row::Image(r) if r.dataset == "flickr30k-entities" => {
                sizes.insert(r.image_id.clone(), (r.width.unwrap(), r.height.unwrap()));
                *splits.entry(r.split.clone()).or_insert(0) += 1;
            }
            Row::Image(r) if r.dataset == "visual-genome" => {
                vg_sizes.insert(r.image_id.clone(), (r.width.unwrap(), r.height.unwrap()));
            }
            Row::SceneGraph(r) => scene_graphs.push(r.clone()),
            Row::Image(r) => {
                // COCO's image records agree with the annotation XML on the size.
                coco_sizes.insert(r.image_id.clone(), (r.width.unwrap(), r.height.unwrap()));
            }
            Row::Caption(r) => {
                captions.insert(r.caption_id.clone(), r.text.clone());
            }
            Row::Grounding(r) => {
                *phrases_per_caption.entry(r.caption_id.clone()).or_default() += 1;
                groundings.push(r.clone());
            }
            Row::Amr(r) => {
                let caption = r.caption_id.clone().unwrap();
                amrs.entry(caption.clone())
                    .or_default()
                    .push(r.penman.clone());
                amr_tokens.insert(caption, r.tokens.clone().unwrap());
            }
            Row::Detection(r) => {
                detections += 1;
                let (w, h) = sizes[&r.image_id];
                let b = &r.bbox;
                assert!(b.x1 >= 0.0 && b.y1 >= 0.0 && b.x1 < b.x2 && b.y1 < b.y2);
                assert!(b.x2 <= f64::from(w) && b.y2 <= f64::from(h), "{r:?}");
                assert!(r.score.is_some_and(|s| (0.0..=1.0).contains(&s)));
            }
            _ => {}
        }
    }
    assert_eq!(sizes.len(), images as usize);
    assert_eq!(coco_sizes, sizes);
    assert_eq!(vg_sizes, sizes);
    // One scene graph per image; its objects are inside the image and its relationships hold
    // (the reader rejects dangling ones, and nothing was rejected).
    assert_eq!(scene_graphs.len(), images as usize);
    for g in &scene_graphs {
        let (w, h) = sizes[&g.image_id];
        assert!(!g.objects.is_empty());
        for o in &g.objects {
            let b = &o.bbox;
            assert!(b.x1 >= 0.0 && b.y1 >= 0.0 && b.x1 < b.x2 && b.y1 < b.y2);
            assert!(b.x2 <= f64::from(w) && b.y2 <= f64::from(h), "{o:?}");
        }
    }
    assert_eq!(captions.len(), images as usize * 5);
    assert!(
        splits.get("train").copied().unwrap_or(0) > 340,
        "{splits:?}"
    );
    assert!(!splits.contains_key("unknown"));
    assert!(detections >= images as usize * 2);

    // Every grounded phrase has its boxes, inside its image; scene phrases are flagged.
    for g in &groundings {
        let (w, h) = sizes[&g.image_id];
        if g.phrase_types.iter().any(|t| t == "scene") {
            assert!(g.is_scene, "{g:?}");
            continue;
        }
        assert!(!g.boxes.is_empty(), "phrase without boxes: {g:?}");
        for b in &g.boxes {
            assert!(b.x1 >= 0.0 && b.y1 >= 0.0 && b.x1 < b.x2 && b.y1 < b.y2);
            assert!(b.x2 <= f64::from(w) && b.y2 <= f64::from(h), "{g:?}");
        }
    }

    // Exactly one AMR per caption, its tokens the caption's, its alignments on forms of the
    // concept; every concept that comes from a word is aligned.
    let mut node_counts = Vec::new();
    for (caption_id, text) in &captions {
        let graphs = &amrs[caption_id];
        assert_eq!(graphs.len(), 1, "{caption_id}");
        let tokens: Vec<&str> = text.split(' ').collect();
        assert_eq!(amr_tokens[caption_id], tokens);
        let graph = parse(&graphs[0]).unwrap();
        let instances: Vec<usize> = (0..graph.triples.len())
            .filter(|&i| graph.triples[i].is_instance())
            .collect();
        node_counts.push(instances.len());
        for &i in &instances {
            let concept = &graph.triples[i].target;
            let aligned: Vec<usize> = graph
                .alignments
                .iter()
                .filter(|a| a.triple == i && !a.on_role)
                .flat_map(|a| a.indices.clone())
                .collect();
            if concept == "wear-01" && !tokens.contains(&"wearing") {
                assert!(aligned.is_empty());
                continue;
            }
            assert_eq!(aligned.len(), 1, "{caption_id}: {concept} not aligned");
            let token = tokens[aligned[0]];
            assert!(
                is_form_of(token, concept_lemma(concept)),
                "{caption_id}: {concept} aligned to {token}"
            );
        }
        for t in graph.triples.iter().filter(|t| t.role == ":quant") {
            let a = graph
                .alignments
                .iter()
                .find(|a| graph.triples[a.triple] == *t)
                .unwrap();
            let word = ["", "one", "two", "three"][t.target.parse::<usize>().unwrap()];
            assert_eq!(tokens[a.indices[0]].to_lowercase(), word);
        }
    }

    // The size distribution documented in docs/synth.md.
    let lengths: Vec<usize> = captions.values().map(|t| t.split(' ').count()).collect();
    let mean = |v: &[usize]| v.iter().sum::<usize>() as f64 / v.len() as f64;
    let length_mean = mean(&lengths);
    let phrase_mean_early = mean(
        &captions
            .keys()
            .map(|c| phrases_per_caption.get(c).copied().unwrap_or(0))
            .collect::<Vec<_>>(),
    );
    eprintln!(
        "tokens mean {length_mean:.2}, phrases mean {phrase_mean_early:.2}, AMR nodes mean {:.2}",
        mean(&node_counts)
    );
    assert!(
        (11.0..=13.0).contains(&length_mean),
        "length mean {length_mean}"
    );
    assert!(lengths.iter().all(|&n| (5..=30).contains(&n)));
    let phrases: Vec<usize> = captions
        .keys()
        .map(|c| phrases_per_caption.get(c).copied().unwrap_or(0))
        .collect();
    let phrase_mean = mean(&phrases);
    assert!((2.5..=3.5).contains(&phrase_mean), "phrases {phrase_mean}");
    assert!(phrases.iter().all(|&n| (2..=6).contains(&n)));
    let node_mean = mean(&node_counts);
    assert!((6.0..=8.0).contains(&node_mean), "AMR nodes {node_mean}");
    assert!(node_counts.iter().all(|&n| (3..=16).contains(&n)));
}

#[test]
fn the_penman_library_reads_every_graph_with_the_same_alignments() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let (_t, dir) = synth(60, 9);
    let script = r#"
import sys, penman
from penman import surface
graphs = penman.load(sys.argv[1])
bad = 0
for g in graphs:
    toks = g.metadata["tok"].split(" ")
    aligned = surface.alignments(g)
    for (src, role, tgt), al in aligned.items():
        if role == ":instance":
            for i in al.indices:
                if not (0 <= i < len(toks)):
                    bad += 1
print(len(graphs), sum(len(surface.alignments(g)) for g in graphs), bad)
"#;
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(dir.join("amr/captions.amr"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let numbers: Vec<usize> = stdout
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(numbers[0], 300);
    assert_eq!(numbers[2], 0, "alignment outside its tokens");
    // Our parser sees the same number of aligned triples.
    let text = std::fs::read_to_string(dir.join("amr/captions.amr")).unwrap();
    let ours: usize = capflow::amr::penman::parse_many(&text)
        .into_iter()
        .map(|b| b.graph.unwrap().alignments.len())
        .sum();
    assert_eq!(numbers[1], ours);
}

#[test]
fn cli_writes_the_layout_and_refuses_a_non_empty_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("d");
    let run = |out: &Path| {
        Command::new(common::capflow_bin())
            .args(["synth", "--images", "12", "--seed", "4", "--out"])
            .arg(out)
            .output()
            .unwrap()
    };
    let first = run(&out);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    for rel in [
        "flickr30k_entities/Sentences/2000011.txt",
        "flickr30k_entities/Annotations/2000000.xml",
        "flickr30k_entities/train.txt",
        "flickr30k_entities/val.txt",
        "flickr30k_entities/test.txt",
        "amr/captions.amr",
        "detections/instances.json",
    ] {
        assert!(out.join(rel).is_file(), "{rel}");
    }
    let second = run(&out);
    assert_eq!(second.status.code(), Some(2));
}

#[test]
fn the_sample_recipe_runs_on_a_synthetic_directory() {
    let (tmp, dir) = synth(40, 3);
    let out = tmp.path().join("dataset");
    let run = Command::new(common::capflow_bin())
        .arg("run")
        .arg(common::repo_root().join("dataflows/sample.toml"))
        .arg("--input")
        .arg(&dir)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains(" 0 rejected"), "{stderr}");
    assert!(out.join("manifest.json").is_file());
}

/// `--render` draws one PNG per image at the size its annotation gives, and only then.
#[test]
fn render_draws_one_picture_per_image_at_its_annotated_size() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("s");
    let status = std::process::Command::new(common::capflow_bin())
        .args([
            "synth", "--images", "6", "--seed", "2", "--render", "-q", "--out",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let mut pictures: Vec<_> = std::fs::read_dir(out.join("images"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    pictures.sort();
    assert_eq!(pictures.len(), 6);
    for picture in pictures {
        let id = picture.file_stem().unwrap().to_string_lossy().into_owned();
        let xml = std::fs::read_to_string(
            out.join("flickr30k_entities/Annotations")
                .join(format!("{id}.xml")),
        )
        .unwrap();
        let field = |name: &str| -> u32 {
            let start = xml.find(&format!("<{name}>")).unwrap() + name.len() + 2;
            xml[start..].split('<').next().unwrap().parse().unwrap()
        };
        let decoded = image::open(&picture).unwrap();
        assert_eq!(
            (decoded.width(), decoded.height()),
            (field("width"), field("height")),
            "{id}"
        );
    }
    let (_tmp, plain) = synth(3, 2);
    assert!(!plain.join("images").exists());
}
