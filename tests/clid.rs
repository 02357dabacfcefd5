//! CLID on Visual Genome scene graphs: the shared VG fixtures (`minyus` samples with their region
//! descriptions, `kgtk` 10-image graphs) and the embedded sample data (scene graphs of the same
//! imaginary photographs as the embedded Flickr30k Entities captions).
//!
//! Acceptance (issue 7): at least 5 length levels, mean length at least 1.5x the original
//! captions' (VG region descriptions for the fixtures, the Flickr30k captions of the same images
//! for the embedded data), every mentioned object's box in the control boxes, same seed → same
//! bytes.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use capflow::augment::clid::{self, ClidConfig};
use capflow::augment::control::word_count;
use capflow::augment::ImageAnnotations;
use capflow::ingest::{read_input, Format, Row, VecSink};
use capflow::schema::{SampleRow, SceneGraphRow};

const SEED: u64 = 20261121;

fn read(format: Format, path: &Path) -> Vec<Row> {
    let mut sink = VecSink::default();
    read_input(format, path, &mut sink).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(sink.rejected.is_empty() || format == Format::VisualGenome);
    sink.rows
}

/// Rows grouped into one [`ImageAnnotations`] per image id, in id order.
fn images(rows: Vec<Row>) -> Vec<ImageAnnotations> {
    let mut by_image: BTreeMap<String, ImageAnnotations> = BTreeMap::new();
    for row in rows {
        let id = row.image_id().to_string();
        by_image
            .entry(id.clone())
            .or_insert_with(|| ImageAnnotations::new(id))
            .push(row);
    }
    by_image.into_values().collect()
}

fn run(images: &[ImageAnnotations], config: &ClidConfig, seed: u64) -> Vec<SampleRow> {
    images
        .iter()
        .flat_map(|image| clid::samples(image, config, seed))
        .collect()
}

fn mean(values: impl Iterator<Item = usize>) -> f64 {
    let (sum, n) = values.fold((0usize, 0usize), |(s, n), v| (s + v, n + 1));
    sum as f64 / n.max(1) as f64
}

fn levels(samples: &[SampleRow]) -> BTreeMap<i32, usize> {
    let mut histogram = BTreeMap::new();
    for s in samples {
        *histogram.entry(s.length_level).or_insert(0) += 1;
    }
    histogram
}

/// Words of a text, lower case, punctuation stripped.
fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

fn contains_phrase(haystack: &[String], phrase: &[String]) -> bool {
    !phrase.is_empty() && haystack.windows(phrase.len()).any(|w| w == phrase)
}

/// Checks, from the text and the scene graph alone, that the control boxes are the boxes of the
/// mentioned objects: every object name that occurs in the text is covered by an object among the
/// control boxes (its name and attributes hold every word of that name: `walk sign` covers
/// `sign`, `system` with the attribute `gaming` covers `gaming system`), and every control box
/// belongs to an object whose name occurs in the text. Names that also occur inside a predicate
/// or inside another object's name (VG has objects named `crack is on road.`) are ambiguous in the
/// text and left to the provenance check.
fn check_boxes(sample: &SampleRow, graph: &SceneGraphRow) {
    let text = words(&sample.text);
    let name_of =
        |o: &capflow::schema::SceneObject| words(o.names.first().map_or("object", String::as_str));
    let controls: Vec<&capflow::schema::SceneObject> = graph
        .objects
        .iter()
        .filter(|o| sample.control_boxes.contains(&o.bbox))
        .collect();
    for object in &graph.objects {
        let name = name_of(object);
        if !contains_phrase(&text, &name) || ambiguous(graph, &name) {
            continue;
        }
        let covered = controls.iter().any(|c| {
            let mut vocabulary = name_of(c);
            vocabulary.extend(c.attributes.iter().flat_map(|a| words(a)));
            name.iter().all(|w| vocabulary.contains(w))
        });
        assert!(
            covered,
            "{}: `{}` is mentioned but no control box covers it: {}",
            sample.sample_id,
            name.join(" "),
            sample.text
        );
    }
    for b in &sample.control_boxes {
        assert!(
            graph
                .objects
                .iter()
                .any(|o| o.bbox == *b && contains_phrase(&text, &name_of(o))),
            "{}: control box {b:?} belongs to no mentioned object",
            sample.sample_id
        );
    }
    // The provenance names the same objects, one box each.
    assert_eq!(sample.provenance.node_ids.len(), sample.control_boxes.len());
    for (id, b) in sample.provenance.node_ids.iter().zip(&sample.control_boxes) {
        let object = graph
            .objects
            .iter()
            .find(|o| o.object_id.to_string() == *id)
            .unwrap();
        assert_eq!(object.bbox, *b, "{}", sample.sample_id);
    }
}

/// Whether `name` can occur in a caption without naming its object: it consists of words the
/// caption template writes itself (VG has objects named `an`), or it occurs inside a predicate,
/// an attribute or a different object name.
fn ambiguous(graph: &SceneGraphRow, name: &[String]) -> bool {
    name.iter()
        .all(|w| ["a", "an", "the", "and"].contains(&w.as_str()))
        || graph
            .relationships
            .iter()
            .any(|r| contains_phrase(&words(&r.predicate), name))
        || graph
            .objects
            .iter()
            .flat_map(|o| &o.attributes)
            .any(|a| contains_phrase(&words(a), name))
        || graph.objects.iter().any(|o| {
            let other = words(o.names.first().map_or("object", String::as_str));
            other != name && contains_phrase(&other, name)
        })
}

fn check_all_boxes(images: &[ImageAnnotations], samples: &[SampleRow]) {
    for sample in samples {
        let image = images
            .iter()
            .find(|i| i.image_id == sample.image_id)
            .unwrap();
        check_boxes(sample, &image.scene_graphs[0]);
        assert_eq!(sample.word_count as usize, word_count(&sample.text));
        assert_eq!(sample.length_level, sample.word_count / 10 + 1);
        assert!((0.0..=100.0).contains(&sample.coverage));
    }
}

fn vg_fixture_images() -> Option<Vec<ImageAnnotations>> {
    let dir = common::fixtures_dir()?.join("visual_genome");
    let mut rows = read(
        Format::VisualGenome,
        &dir.join("minyus_scene_graphs.json_samples.json"),
    );
    rows.extend(read(
        Format::VisualGenome,
        &dir.join("minyus_region_descriptions.json_samples.json"),
    ));
    Some(images(rows))
}

#[test]
fn vg_fixtures_span_five_levels_and_are_longer_than_region_descriptions() {
    let Some(images) = vg_fixture_images() else {
        return;
    };
    let with_graphs: Vec<ImageAnnotations> = images
        .into_iter()
        .filter(|i| !i.scene_graphs.is_empty())
        .collect();
    assert_eq!(with_graphs.len(), 100);
    let samples = run(&with_graphs, &ClidConfig::default(), SEED);
    let generated = mean(samples.iter().map(|s| s.word_count as usize));
    let original = mean(
        with_graphs
            .iter()
            .flat_map(|i| &i.captions)
            .map(|c| word_count(&c.text)),
    );
    let histogram = levels(&samples);
    eprintln!(
        "VG fixtures: {} samples, mean {generated:.2} words vs {original:.2} in region \
         descriptions; levels {histogram:?}; share >= 20 words {:.1}%",
        samples.len(),
        100.0 * samples.iter().filter(|s| s.word_count >= 20).count() as f64 / samples.len() as f64
    );
    assert!(samples.len() >= 400, "{}", samples.len());
    assert!(histogram.len() >= 5, "{histogram:?}");
    assert!(generated >= 1.5 * original, "{generated} vs {original}");
    check_all_boxes(&with_graphs, &samples);
}

#[test]
fn kgtk_graphs_generate_grounded_captions() {
    let Some(path) = common::fixture("visual_genome/kgtk_vg10_scene_graphs.json") else {
        return;
    };
    let images = images(read(Format::VisualGenome, &path));
    assert_eq!(images.len(), 10);
    let samples = run(&images, &ClidConfig::default(), SEED);
    assert!(samples.len() >= 30, "{}", samples.len());
    assert!(levels(&samples).len() >= 4, "{:?}", levels(&samples));
    check_all_boxes(&images, &samples);
}

fn embedded_images() -> Vec<ImageAnnotations> {
    let data = common::repo_root().join("examples/data");
    let mut rows = read(Format::VisualGenome, &data.join("visual_genome"));
    let graphs: BTreeSet<String> = rows
        .iter()
        .filter(|r| matches!(r, Row::SceneGraph(_)))
        .map(|r| r.image_id().to_string())
        .collect();
    rows.extend(
        read(Format::Flickr30kEntities, &data.join("flickr30k_entities"))
            .into_iter()
            .filter(|r| matches!(r, Row::Caption(_)) && graphs.contains(r.image_id())),
    );
    images(rows)
}

/// The embedded graphs have 12-16 objects, 1-3 attributes each and 8-15 relationships (real
/// Visual Genome images: about 35 objects, 21 relationships). Issue 7's bar holds on them with
/// the default settings, random cut included: at least 5 length levels and a mean length of at
/// least 1.5x the captions of the same images.
#[test]
fn embedded_data_is_longer_than_its_captions() {
    let images = embedded_images();
    assert_eq!(images.len(), 8);
    assert!(images.iter().all(|i| i.captions.len() == 5));
    let original = mean(
        images
            .iter()
            .flat_map(|i| &i.captions)
            .map(|c| word_count(&c.text)),
    );
    let samples = run(&images, &ClidConfig::default(), SEED);
    let generated = mean(samples.iter().map(|s| s.word_count as usize));
    let uncut = ClidConfig {
        cut_last_objects: false,
        ..ClidConfig::default()
    };
    let full_walks = run(&images, &uncut, SEED);
    let full = mean(full_walks.iter().map(|s| s.word_count as usize));
    eprintln!(
        "embedded: {} samples, mean {generated:.2} words ({full:.2} without the cut) vs \
         {original:.2} in the Flickr30k captions; levels {:?}",
        samples.len(),
        levels(&samples)
    );
    assert!(generated >= 1.5 * original, "{generated} vs {original}");
    assert!(full >= generated, "{full} vs {generated}");
    assert!(levels(&samples).len() >= 5, "{:?}", levels(&samples));
    check_all_boxes(&images, &samples);
    check_all_boxes(&images, &full_walks);
    // Sizes come from image_data.json: coverage is known.
    assert!(samples.iter().all(|s| s.coverage > 0.0));
}

#[test]
fn union_of_fixtures_and_embedded_data_spans_five_levels() {
    let Some(mut images) = vg_fixture_images() else {
        return;
    };
    images.retain(|i| !i.scene_graphs.is_empty());
    images.extend(embedded_images());
    let samples = run(&images, &ClidConfig::default(), SEED);
    assert!(levels(&samples).len() >= 5, "{:?}", levels(&samples));
}

#[test]
fn same_seed_same_bytes_other_seed_other_captions() {
    let images = embedded_images();
    let config = ClidConfig::default();
    let first = serde_json::to_vec(&run(&images, &config, SEED)).unwrap();
    let again = serde_json::to_vec(&run(&images, &config, SEED)).unwrap();
    assert_eq!(first, again);
    // Image order does not matter: each image's samples depend on that image only.
    let mut reversed: Vec<ImageAnnotations> = images.clone();
    reversed.reverse();
    let mut rows = run(&reversed, &config, SEED);
    rows.sort_by(|a, b| a.image_id.cmp(&b.image_id));
    assert_eq!(serde_json::to_vec(&rows).unwrap(), first);
    let other = serde_json::to_vec(&run(&images, &config, SEED + 1)).unwrap();
    assert_ne!(first, other);
}

#[test]
fn paragraph_mode_uses_thirteen_levels_and_sentences() {
    let Some(mut images) = vg_fixture_images() else {
        return;
    };
    images.retain(|i| !i.scene_graphs.is_empty());
    let config = ClidConfig {
        paragraph: true,
        ..ClidConfig::default()
    };
    let samples = run(&images, &config, SEED);
    let histogram = levels(&samples);
    eprintln!("paragraphs: levels {histogram:?}");
    assert!(histogram.keys().all(|l| (1..=13).contains(l)));
    assert!(histogram.keys().any(|&l| l > 7), "{histogram:?}");
    for s in &samples {
        assert!(s.text.ends_with('.'), "{}", s.text);
        assert!(s.text.starts_with(char::is_uppercase), "{}", s.text);
        assert!(s.word_count <= 129);
    }
    check_all_boxes(&images, &samples);
}

#[test]
#[ignore]
fn print_proxy_statistics() {
    use capflow::augment::clid::SaliencyProxy;
    let Some(mut vg) = vg_fixture_images() else {
        return;
    };
    vg.retain(|i| !i.scene_graphs.is_empty());
    for (proxy, cut) in [
        (SaliencyProxy::Area, true),
        (SaliencyProxy::AreaDegree, true),
        (SaliencyProxy::Area, false),
    ] {
        let config = ClidConfig {
            saliency_proxy: proxy,
            cut_last_objects: cut,
            ..ClidConfig::default()
        };
        for (name, images) in [("vg", &vg), ("embedded", &embedded_images())] {
            let samples = run(images, &config, SEED);
            eprintln!(
                "{proxy:?} cut {cut} {name}: {} samples, mean {:.2} words, levels {:?}",
                samples.len(),
                mean(samples.iter().map(|s| s.word_count as usize)),
                levels(&samples)
            );
        }
    }
}
