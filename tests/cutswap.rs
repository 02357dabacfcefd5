//! CutSwap on the embedded sample data: text swaps change exactly one object (and its
//! attributes) with number agreement and a member of the chosen cluster; the object clusters
//! equal scikit-learn's; image swaps paste over the replaced boxes and leave other mentioned
//! objects visible.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use capflow::augment::cutswap::clusters::{cluster, cosine_distances, silhouette_score};
use capflow::augment::cutswap::{fit, ClusterCount, Config, Model, TextSwap};
use capflow::augment::ImageAnnotations;
use capflow::ingest::{read_input, Format, VecSink};
use capflow::schema::BoxXyxy;
use capflow::text::cosine;
use serde_json::Value;

fn sample_images() -> Vec<ImageAnnotations> {
    let data = common::repo_root().join("examples/data");
    let mut sink = VecSink::default();
    for (format, path) in [
        (Format::Flickr30kEntities, "flickr30k_entities"),
        (Format::CocoInstances, "detections/instances.json"),
        (Format::VisualGenome, "visual_genome/scene_graphs.json"),
    ] {
        read_input(format, &data.join(path), &mut sink).expect("read sample data");
    }
    assert!(sink.rejected.is_empty(), "{:?}", sink.rejected);
    let mut images: BTreeMap<String, ImageAnnotations> = BTreeMap::new();
    for row in sink.rows {
        let id = row.image_id().to_string();
        images
            .entry(id.clone())
            .or_insert_with(|| ImageAnnotations::new(id))
            .push(row);
    }
    images.into_values().collect()
}

fn config() -> Config {
    Config {
        clusters: ClusterCount::Silhouette,
        ..Config::default()
    }
}

/// Plural by spelling, written independently of the code under test: the irregular plurals of
/// the sample captions, or a final `s` that is not `ss`/`us`.
fn looks_plural(word: &str) -> bool {
    const IRREGULAR: [&str; 6] = ["men", "women", "children", "people", "feet", "fishermen"];
    IRREGULAR.contains(&word)
        || (word.ends_with('s') && !word.ends_with("ss") && !word.ends_with("us"))
}

fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_lowercase).collect()
}

/// The differing windows of two token lists: (source window, swapped window).
fn diff_window(a: &[String], b: &[String]) -> (Vec<String>, Vec<String>) {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    (
        a[prefix..a.len() - suffix].to_vec(),
        b[prefix..b.len() - suffix].to_vec(),
    )
}

/// The cluster whose mean vector is most cosine-similar to `lemma`'s vector, recomputed here
/// from the lemma vectors and labels.
fn nearest_cluster(model: &Model, lemma: &str) -> usize {
    let lemmas = model.lemmas();
    let vectors = model.lemma_vectors();
    let labels = &model.clusters().labels;
    let k = labels.iter().max().unwrap() + 1;
    let dim = vectors[0].len();
    let mut centres = vec![vec![0f32; dim]; k];
    let mut sizes = vec![0f32; k];
    for (v, &l) in vectors.iter().zip(labels) {
        sizes[l] += 1.0;
        for (c, x) in centres[l].iter_mut().zip(v) {
            *c += x;
        }
    }
    let own = &vectors[lemmas.iter().position(|l| l == lemma).unwrap()];
    (0..k)
        .map(|c| {
            let centre: Vec<f32> = centres[c].iter().map(|x| x / sizes[c]).collect();
            (c, cosine(&centre, own))
        })
        .fold((0, f64::NEG_INFINITY), |best, (c, s)| {
            if s > best.1 + 1e-9 {
                (c, s)
            } else {
                best
            }
        })
        .0
}

fn check_swap(model: &Model, swap: &TextSwap) {
    let context = format!("{:?} -> {:?}", swap.source_text, swap.text);
    let (mut old, mut new) = diff_window(&words(&swap.source_text), &words(&swap.text));
    assert!(
        !old.is_empty() || !new.is_empty(),
        "nothing changed: {context}"
    );
    // An article may change to agree with the new first word (`a apple` is not English).
    if old.first().is_some_and(|w| w == "a" || w == "an")
        && new.first().is_some_and(|w| w == "a" || w == "an")
        && old[0] != new[0]
    {
        let next = new.get(1).expect("a word after the article");
        let vowel = next.starts_with(['a', 'e', 'i', 'o', 'u']);
        assert_eq!(new[0] == "an", vowel, "article before {next:?}: {context}");
        old.remove(0);
        new.remove(0);
    }
    // The source window holds only the object and its attributes (with `and`/commas between).
    let from_words: Vec<&str> = swap.from_object.split(' ').collect();
    for w in &old {
        assert!(
            swap.from_attributes.contains(w)
                || from_words.contains(&w.as_str())
                || w == "and"
                || w == ",",
            "{w:?} changed but is neither the object nor its attribute: {context}"
        );
    }
    // The new window holds only the new object and at most one attribute.
    let to_words: Vec<&str> = swap.to_object.split(' ').collect();
    let new_attributes: Vec<&String> = new
        .iter()
        .filter(|w| !to_words.contains(&w.as_str()))
        .collect();
    assert!(
        new_attributes.len() <= 1,
        "more than one new attribute: {context}"
    );
    if let Some(attribute) = new_attributes.first() {
        assert_eq!(
            Some(attribute.as_str()),
            swap.to_attribute.as_deref(),
            "{context}"
        );
        assert!(
            model
                .attributes_of(&swap.to_lemma)
                .contains(&attribute.as_str()),
            "{attribute} was never seen with {}: {context}",
            swap.to_lemma
        );
        // The pair statistics name captions that really show the attribute.
        for id in model.pair_captions(&swap.to_lemma, attribute) {
            assert!(!id.is_empty());
        }
    }
    // Exactly one object: the new object words appear once in the window, or (attribute-only
    // change) the object is unchanged and follows the window.
    if swap.to_object != swap.from_object {
        let last = new.last().expect("new object words");
        assert_eq!(
            last,
            to_words.last().unwrap(),
            "the window ends with the new object: {context}"
        );
        assert_eq!(
            old.last().map(String::as_str),
            from_words.last().copied(),
            "{context}"
        );
    } else {
        assert!(!old.is_empty() || !new.is_empty());
    }
    // Number agreement, judged by spelling.
    let from_head = from_words.last().unwrap();
    let to_head = to_words.last().unwrap();
    assert_eq!(
        looks_plural(from_head),
        looks_plural(to_head),
        "number of {from_head:?} and {to_head:?}: {context}"
    );
    // The new object comes from the cluster nearest to the old one.
    assert!(
        model
            .cluster_members(swap.cluster)
            .contains(&swap.to_lemma.as_str()),
        "{} is not in cluster {}: {context}",
        swap.to_lemma,
        swap.cluster
    );
    assert_eq!(
        swap.cluster,
        nearest_cluster(model, &swap.from_lemma),
        "{context}"
    );
}

#[test]
fn text_swaps_change_one_object_with_number_agreement() {
    let images = sample_images();
    let model = fit(&images, &config()).expect("fit");
    assert!(model.lemmas().len() >= 20, "lemmas: {:?}", model.lemmas());
    let mut swaps = 0;
    let mut object_changes = 0;
    for image in &images {
        let samples = model.samples(image, 7);
        let text_swaps = model.text_swaps(image, 7);
        assert_eq!(samples.len(), text_swaps.len());
        for (sample, swap) in samples.iter().zip(&text_swaps) {
            assert_eq!(sample.method, "cutswap");
            assert_eq!(sample.text, swap.text);
            assert_eq!(
                sample.provenance.source_caption_ids,
                std::slice::from_ref(&swap.caption_id)
            );
            assert_eq!(sample.control_boxes.len(), sample.control_labels.len());
            assert!(sample.coverage > 0.0 && sample.coverage <= 100.0);
            check_swap(&model, swap);
            swaps += 1;
            object_changes += usize::from(swap.to_lemma != swap.from_lemma);
        }
    }
    eprintln!("{swaps} swaps, {object_changes} with a new object");
    assert!(swaps >= 20, "only {swaps} swaps on the sample data");
    assert!(object_changes >= 5, "only {object_changes} object changes");
}

#[test]
fn swaps_do_not_depend_on_image_order() {
    let images = sample_images();
    let mut reversed = images.clone();
    reversed.reverse();
    let a = fit(&images, &config()).expect("fit");
    let b = fit(&reversed, &config()).expect("fit");
    assert_eq!(a.lemmas(), b.lemmas());
    assert_eq!(a.clusters().labels, b.clusters().labels);
    for image in &images {
        assert_eq!(a.samples(image, 3), b.samples(image, 3));
    }
    // Another seed draws other swaps somewhere.
    let differs = images.iter().any(|i| a.samples(i, 3) != a.samples(i, 4));
    assert!(differs);
}

#[test]
fn object_clusters_equal_scikit_learn() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let images = sample_images();
    let model = fit(&images, &config()).expect("fit");
    let n = model.lemmas().len();
    let fixed_k = [2, 5, n / 2, n - 1];
    let spec = serde_json::json!({
        "lemmas": model.lemmas(),
        "vectors": model.lemma_vectors().iter().map(|v| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>()).collect::<Vec<_>>(),
        "fixed_k": fixed_k,
    });
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("lemmas.json");
    std::fs::write(&input, spec.to_string()).unwrap();
    let output = Command::new(python)
        .arg(common::repo_root().join("tests/oracles/cutswap_cluster_oracle.py"))
        .arg(&input)
        .output()
        .expect("run oracle");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let oracle: Value = serde_json::from_slice(&output.stdout).expect("oracle JSON");

    let distances = cosine_distances(model.lemma_vectors()).unwrap();
    let theirs = oracle["distances"].as_array().unwrap();
    assert_eq!(theirs.len(), n);
    for (i, row) in theirs.iter().enumerate() {
        for (j, d) in row.as_array().unwrap().iter().enumerate() {
            let d = d.as_f64().unwrap();
            assert!((distances.get(i, j) - d).abs() < 1e-12, "distance {i},{j}");
        }
    }
    let labels = |v: &Value| -> Vec<usize> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect()
    };
    for k in fixed_k {
        let ours = cluster(model.lemma_vectors(), ClusterCount::Fixed(k))
            .unwrap()
            .labels;
        assert_eq!(ours, labels(&oracle["fixed"][k.to_string()]), "k = {k}");
        let score = silhouette_score(&distances, &ours);
        let expected = oracle["silhouette"][k.to_string()].as_f64().unwrap_or(0.0);
        if k >= 2 && k < n {
            assert!(
                (score - expected).abs() < 1e-9,
                "silhouette at k = {k}: {score} vs {expected}"
            );
        }
    }
    let best_k = oracle["best_k"].as_u64().unwrap() as usize;
    assert_eq!(
        model.clusters().members.len(),
        best_k,
        "silhouette choice of k"
    );
    assert_eq!(model.clusters().labels, labels(&oracle["best_labels"]));
    eprintln!("{n} lemmas, silhouette picked k = {best_k}");
}

fn rgb(path: &Path) -> image::RgbImage {
    image::open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .to_rgb8()
}

fn boxes(value: &Value) -> Vec<BoxXyxy> {
    serde_json::from_value(value.clone()).expect("boxes")
}

fn pixel_in(b: &BoxXyxy, x: u32, y: u32) -> bool {
    let (cx, cy) = (x as f64 + 0.5, y as f64 + 0.5);
    cx > b.x1 && cx < b.x2 && cy > b.y1 && cy < b.y2
}

#[test]
fn image_swaps_cover_the_replaced_box_and_spare_other_objects() {
    let images = sample_images();
    let image_dir = common::repo_root().join("examples/data/images");
    let mut config = config();
    config.image.images_dir = Some(image_dir.clone());
    config.image.file_name = "{image_id}.png".into();
    let model = fit(&images, &config).expect("fit");
    let mut checked = 0;
    let mut interiors = 0;
    for image in &images {
        let (samples, rejected) = model.image_samples(image, 11, None).expect("image swaps");
        assert!(rejected.is_empty(), "{rejected:?}");
        let per_swap = samples
            .iter()
            .fold(BTreeMap::<String, usize>::new(), |mut m, s| {
                let detail: Value =
                    serde_json::from_str(s.provenance.subgraph.as_ref().unwrap()).unwrap();
                *m.entry(format!(
                    "{}#{}",
                    detail["text"]["caption_id"], detail["text"]["index"]
                ))
                .or_default() += 1;
                m
            });
        assert!(
            per_swap.values().all(|&n| n <= 3),
            "at most keep_top pairs per swap"
        );
        for sample in &samples {
            let detail: Value =
                serde_json::from_str(sample.provenance.subgraph.as_ref().unwrap()).unwrap();
            let swapped = &detail["image"];
            let png = sample
                .image
                .as_ref()
                .expect("an image swap carries its image");
            assert_eq!(png.path, format!("{}.png", sample.sample_id));
            let result = image::load_from_memory_with_format(&png.bytes, image::ImageFormat::Png)
                .expect("the swapped image is a PNG")
                .to_rgb8();
            let original = rgb(&image_dir.join(format!("{}.png", image.image_id)));
            let source = rgb(&image_dir.join(format!(
                "{}.png",
                swapped["source_image_id"].as_str().unwrap()
            )));
            assert_eq!(result.dimensions(), original.dimensions());
            let pasted = boxes(&swapped["pasted_boxes"]);
            let protected = boxes(&swapped["protected_boxes"]);
            let source_box: BoxXyxy =
                serde_json::from_value(swapped["source_box"].clone()).unwrap();
            assert!(swapped["score"].as_f64().unwrap() >= 0.6);

            // The replaced object's grounded boxes are all under a pasted box.
            let caption_id = detail["text"]["caption_id"].as_str().unwrap();
            let from_object = detail["text"]["from_object"].as_str().unwrap();
            // The whitespace word holding the end of the replaced text is the object's last word.
            let source_text = detail["text"]["source_text"].as_str().unwrap();
            let end = detail["text"]["replaced"]["end"].as_u64().unwrap() as usize;
            let word = source_text[..end].split_whitespace().count() - 1;
            assert_eq!(
                source_text
                    .split_whitespace()
                    .nth(word)
                    .map(str::to_lowercase)
                    .as_deref(),
                from_object.split(' ').next_back()
            );
            let grounded: Vec<&BoxXyxy> = image
                .groundings
                .iter()
                .filter(|g| {
                    g.caption_id == caption_id
                        && g.token_start as usize <= word
                        && word < g.token_end as usize
                })
                .flat_map(|g| &g.boxes)
                .collect();
            assert!(!grounded.is_empty(), "no grounded box for {from_object}");
            for g in &grounded {
                assert!(
                    pasted.iter().any(|p| p.iou(g) > 0.5),
                    "{g:?} not covered by {pasted:?}"
                );
            }

            let (w, h) = result.dimensions();
            let mut omitted = 0usize;
            let mut total = 0usize;
            let (mut interior, mut matching) = (0usize, 0usize);
            for y in 0..h {
                for x in 0..w {
                    let changed = result.get_pixel(x, y) != original.get_pixel(x, y);
                    let in_pasted = pasted.iter().any(|b| pixel_in(b, x, y));
                    let in_protected = protected.iter().any(|b| pixel_in(b, x, y));
                    if !in_pasted || in_protected {
                        // Outside the pasted boxes and inside protected boxes nothing changes.
                        assert!(!changed, "pixel {x},{y} changed outside the pasted area");
                    }
                    if in_pasted {
                        total += 1;
                        omitted += usize::from(in_protected);
                    }
                    // The middle half of a pasted box, away from protected boxes, shows the source
                    // patch at the same relative place.
                    for b in &pasted {
                        let (bw, bh) = (b.x2 - b.x1, b.y2 - b.y1);
                        let (u, v) = ((x as f64 + 0.5 - b.x1) / bw, (y as f64 + 0.5 - b.y1) / bh);
                        let near_protected = protected.iter().any(|p| {
                            let m = 0.1 * bw.min(bh);
                            x as f64 + 0.5 > p.x1 - m
                                && x as f64 + 0.5 < p.x2 + m
                                && y as f64 + 0.5 > p.y1 - m
                                && y as f64 + 0.5 < p.y2 + m
                        });
                        if (0.25..0.75).contains(&u) && (0.25..0.75).contains(&v) && !near_protected
                        {
                            let sx = (source_box.x1 + u * (source_box.x2 - source_box.x1)) as u32;
                            let sy = (source_box.y1 + v * (source_box.y2 - source_box.y1)) as u32;
                            let expected = source
                                .get_pixel(sx.min(source.width() - 1), sy.min(source.height() - 1));
                            let got = result.get_pixel(x, y);
                            interior += 1;
                            let close = (0..3).all(|c| {
                                (i32::from(expected.0[c]) - i32::from(got.0[c])).abs() <= 12
                            });
                            matching += usize::from(close);
                        }
                    }
                }
            }
            assert!(total > 0);
            let omitted_fraction = omitted as f64 / total as f64;
            assert!(omitted_fraction <= 0.5 + 1e-9, "omitted {omitted_fraction}");
            // Protected boxes may cover the middle of a pasted box; the other swaps check it.
            if interior > 0 {
                assert!(
                    matching as f64 >= 0.9 * interior as f64,
                    "{matching} of {interior} interior pixels show the source patch"
                );
                interiors += 1;
            }
            checked += 1;
        }
    }
    eprintln!("{checked} swapped images checked, {interiors} with the patch's middle visible");
    assert!(
        checked >= 3,
        "only {checked} image swaps on the shipped images"
    );
    assert!(
        interiors >= 3,
        "only {interiors} swaps show the middle of their patch"
    );
}

#[test]
fn unreadable_images_are_rejected_records() {
    let images = sample_images();
    let dir = tempfile::tempdir().unwrap();
    let image_dir = dir.path().join("images");
    std::fs::create_dir(&image_dir).unwrap();
    // Every image file exists but is not a PNG.
    for image in &images {
        std::fs::write(
            image_dir.join(format!("{}.png", image.image_id)),
            b"not a png",
        )
        .unwrap();
    }
    let mut config = config();
    config.image.images_dir = Some(image_dir.clone());
    config.image.file_name = "{image_id}.png".into();
    let model = fit(&images, &config).expect("fit");
    let mut rejected_total = 0;
    for image in &images {
        let (samples, rejected) = model.image_samples(image, 11, None).expect("no error");
        assert!(samples.is_empty());
        for r in &rejected {
            assert_eq!(r.format, "cutswap-image");
            assert!(r.source_file.ends_with(".png"), "{r:?}");
            assert!(r.record.starts_with("image "), "{r:?}");
            assert!(
                r.reason.contains("decode") || r.reason.contains("read"),
                "{r:?}"
            );
        }
        rejected_total += rejected.len();
    }
    assert!(rejected_total > 0);
}

/// Runs `recipe` (a file of `dataflows/`), changed by `edit`, into `out` with `args`.
fn run_recipe(recipe: &str, edit: impl Fn(String) -> String, out: &Path, args: &[&str]) {
    let root = common::repo_root();
    let text = std::fs::read_to_string(root.join("dataflows").join(recipe)).unwrap();
    // The recipe's paths are relative to `dataflows/`.
    let text = edit(text.replace("\"../examples/", &format!("\"{}/examples/", root.display())));
    let spec = out.with_extension("toml");
    std::fs::write(&spec, text).unwrap();
    let output = Command::new(common::capflow_bin())
        .current_dir(&root)
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(out)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn cutswap_samples(out: &Path) -> Vec<capflow::schema::SampleRow> {
    capflow::export::read_table(out, capflow::schema::TableKind::Samples)
        .unwrap()
        .flat_map(|b| capflow::schema::batch_to_rows(&b.unwrap()).unwrap())
        .filter(|s: &capflow::schema::SampleRow| s.method == "cutswap")
        .collect()
}

fn detail(sample: &capflow::schema::SampleRow) -> Value {
    serde_json::from_str(sample.provenance.subgraph.as_deref().unwrap()).unwrap()
}

fn quality(sample: &capflow::schema::SampleRow, name: &str) -> f64 {
    sample
        .quality
        .iter()
        .find(|q| q.name == name)
        .unwrap_or_else(|| panic!("no {name} score"))
        .value
}

/// `dataflows/cutswap-images.toml`: the image swaps run in the dataflow, and each swapped image
/// is in its sample's `image` column: a PNG of the original's size that differs from the original
/// only inside the pasted boxes, beside the swapped caption that the text swap of the same
/// caption and swap wrote too. Two workers write the same bytes.
#[test]
fn the_image_swap_recipe_pairs_swapped_images_with_their_captions() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("one");
    run_recipe("cutswap-images.toml", |t| t, &out, &["-w", "1"]);
    let samples = cutswap_samples(&out);
    let (with_image, text_only): (Vec<_>, Vec<_>) = samples.iter().partition(|s| s.image.is_some());
    assert!(with_image.len() >= 10, "{} image swaps", with_image.len());
    let images_dir = common::repo_root().join("examples/data/images");
    let mut per_swap: BTreeMap<String, usize> = BTreeMap::new();
    for sample in &with_image {
        let image = sample.image.as_ref().unwrap();
        assert_eq!(image.path, format!("{}.png", sample.sample_id));
        let result = image::load_from_memory_with_format(&image.bytes, image::ImageFormat::Png)
            .expect("a PNG")
            .to_rgb8();
        let original = rgb(&images_dir.join(format!("{}.png", sample.image_id)));
        assert_eq!(result.dimensions(), original.dimensions());
        let detail = detail(sample);
        let pasted = boxes(&detail["image"]["pasted_boxes"]);
        let mut changed = 0;
        for (x, y, pixel) in result.enumerate_pixels() {
            if pixel != original.get_pixel(x, y) {
                changed += 1;
                assert!(
                    pasted.iter().any(|b| pixel_in(b, x, y)),
                    "{}: pixel {x},{y} changed outside the pasted boxes",
                    sample.sample_id
                );
            }
        }
        assert!(changed > 0, "{} is the original image", sample.sample_id);
        assert!(quality(sample, "cutswap_image_text") >= 0.6);
        // The text swap of the same caption and draw is a sample with the same text.
        let (caption, index) = (&detail["text"]["caption_id"], &detail["text"]["index"]);
        assert!(
            text_only.iter().any(|t| {
                let d = self::detail(t);
                &d["text"]["caption_id"] == caption
                    && &d["text"]["index"] == index
                    && t.text == sample.text
            }),
            "no text swap for {}",
            sample.text
        );
        *per_swap.entry(format!("{caption}#{index}")).or_default() += 1;
    }
    assert!(per_swap.values().all(|&n| n <= 3), "keep_top is 3");

    let two = tmp.path().join("two");
    run_recipe("cutswap-images.toml", |t| t, &two, &["-w", "2"]);
    assert_eq!(common::data_files(&out), common::data_files(&two));
}

/// `[models.image_text_scorer]` re-ranks the image swaps through the adapter protocol: with the
/// stand-in scoring each image file by its bytes' SHA-256, every kept pair's score is that of its
/// own PNG, at least the external threshold 0.28, and ranks follow the scores.
#[test]
fn an_external_image_text_scorer_reranks_the_image_swaps() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("scored");
    let command = common::stand_in(&python, &["image_text_scorer", "--image-score", "sha256"]);
    run_recipe(
        "cutswap-images.toml",
        |t| format!("{t}\n[models.image_text_scorer]\ncommand = {command}\nmax_restarts = 0\n"),
        &out,
        &[],
    );
    let samples = cutswap_samples(&out);
    let mut groups: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for sample in samples.iter().filter(|s| s.image.is_some()) {
        use sha2::Digest;
        let bytes = &sample.image.as_ref().unwrap().bytes;
        let digest = sha2::Sha256::digest(bytes);
        let expected =
            u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) as f64 / 2f64.powi(32);
        let score = quality(sample, "cutswap_image_text");
        assert!((score - expected).abs() < 1e-12, "{score} vs {expected}");
        assert!(score >= 0.28, "{score} kept under the threshold");
        let detail = detail(sample);
        assert_eq!(detail["image"]["scorer"], "external");
        groups
            .entry(format!(
                "{}#{}",
                detail["text"]["caption_id"], detail["text"]["index"]
            ))
            .or_default()
            .push((quality(sample, "cutswap_rank"), score));
    }
    assert!(
        groups.len() >= 3,
        "{} swaps with scored images",
        groups.len()
    );
    for (_, mut ranked) in groups {
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(ranked.windows(2).all(|w| w[0].1 >= w[1].1), "{ranked:?}");
    }
}

/// `[models.embedder]` gives CutSwap its object words' vectors: with the stand-in's vectors
/// `[1, 0]` for a word starting with a to m and `[0, 1]` else, and two clusters, a one-word
/// object (whose forms, `tree`/`trees`, `man`/`men`, share its initial) swaps only for a
/// one-word object from the same half of the alphabet.
#[test]
fn an_external_embedder_gives_cutswap_its_object_clusters() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("embedded");
    let command = common::stand_in(&python, &["embedder", "--embed", "initial"]);
    run_recipe(
        "cutswap.toml",
        |t| {
            let t = t.replace("clusters = \"silhouette\"", "clusters = 2");
            format!("{t}\n[models.embedder]\ncommand = {command}\nmax_restarts = 0\n")
        },
        &out,
        &[],
    );
    let samples = cutswap_samples(&out);
    let lemma = |s: &capflow::schema::SampleRow, prefix: &str| -> String {
        s.provenance
            .node_ids
            .iter()
            .find_map(|n| n.strip_prefix(prefix))
            .unwrap()
            .to_string()
    };
    let half = |word: &str| word.starts_with(|c: char| ('a'..='m').contains(&c));
    let mut halves = std::collections::BTreeSet::new();
    let mut checked = 0;
    for sample in &samples {
        let (from, to) = (lemma(sample, "object:"), lemma(sample, "swap:"));
        if from.contains(' ') || to.contains(' ') {
            continue;
        }
        assert_eq!(half(&from), half(&to), "{from} → {to} crosses the clusters");
        halves.insert(half(&from));
        checked += 1;
    }
    assert!(checked >= 20, "{checked} one-word swaps");
    assert_eq!(halves.len(), 2, "swaps in both clusters");
}

/// docs/cutswap.md's recipe command and its `datasets` example run as written (output under a
/// temporary directory): the image swaps load as PIL images.
#[test]
fn the_documented_image_swap_example_loads_pairs_with_datasets() {
    let Some(python) = common::oracle_python() else {
        return;
    };
    let doc = std::fs::read_to_string(common::repo_root().join("docs/cutswap.md")).unwrap();
    let block = |fence: &str, needle: &str| -> String {
        doc.split(fence)
            .skip(1)
            .map(|b| b.split("```").next().unwrap())
            .find(|b| b.contains(needle))
            .unwrap_or_else(|| panic!("docs/cutswap.md has no {fence} block with {needle}"))
            .to_string()
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out/cutswap-images");
    let command = block("```text\n", "cutswap-images.toml");
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words[..2], ["capflow", "run"], "{command}");
    let output = Command::new(common::capflow_bin())
        .current_dir(common::repo_root())
        .args(&words[1..])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let example = block("```python\n", "load_dataset").replace(
        "\"out/cutswap-images\"",
        &format!("{:?}", out.display().to_string()),
    );
    let script = format!(
        "{example}\nimport PIL.Image\nassert isinstance(pairs[0][\"image\"], PIL.Image.Image)\n\
         print(len(pairs), pairs[0][\"image\"].size)\n"
    );
    let output = common::hf_offline(Command::new(python).arg("-c").arg(&script), tmp.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8_lossy(&output.stdout);
    let pairs: usize = printed.split_whitespace().next().unwrap().parse().unwrap();
    let samples = cutswap_samples(&out);
    let expected = samples
        .iter()
        .filter(|s| s.image.is_some() && s.split == "train")
        .count();
    assert!(expected > 0);
    assert_eq!(pairs, expected, "{printed}");
}
