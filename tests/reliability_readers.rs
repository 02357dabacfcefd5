//! Bad input a data engineer meets, through the readers: files that once lost records without a
//! word (a truncated sizes file, broken links, `\r` line ends, byte order marks), inputs that
//! once hung or grew memory without bound (a FIFO, `/dev/zero`, a line with no end, deep XML,
//! a huge segmentation), and boxes that once became infinite. Every case must end in rows, a
//! rejected record with its reason, or an error naming the file, and quickly.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use capflow::ingest::{read_input, Format, Row, VecSink};

/// Counts the bytes allocated by each thread, so that a test can measure the peak memory of a
/// read that runs on its own thread, whatever the other tests do meanwhile.
struct PerThreadPeak;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    // `try_with`: a thread's locals are gone while it is being torn down.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; only counters are kept.
unsafe impl GlobalAlloc for PerThreadPeak {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            track(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            track(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        track(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            track(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: PerThreadPeak = PerThreadPeak;

/// What `f` returns and the most bytes it had allocated at once on this thread.
fn peak_bytes<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(Cell::get) - base;
    (out, peak.max(0) as usize)
}

const MIB: usize = 1 << 20;

fn read(format: Format, path: &Path) -> VecSink {
    let mut sink = VecSink::default();
    read_input(format, path, &mut sink)
        .unwrap_or_else(|e| panic!("{} as {}: {e}", path.display(), format.name()));
    sink
}

/// Reads on another thread and gives up after `limit`: a read that blocks or runs for minutes
/// fails the test instead of hanging the suite.
fn read_within(format: Format, path: &Path, limit: Duration) -> capflow::error::Result<VecSink> {
    let (tx, rx) = mpsc::channel();
    let owned = path.to_path_buf();
    std::thread::spawn(move || {
        let mut sink = VecSink::default();
        let outcome = read_input(format, &owned, &mut sink).map(|()| sink);
        let _ = tx.send(outcome);
    });
    match rx.recv_timeout(limit) {
        Ok(outcome) => outcome,
        Err(_) => panic!(
            "reading {} as {} did not finish within {limit:?}",
            path.display(),
            format.name()
        ),
    }
}

fn reasons(sink: &VecSink) -> Vec<(String, String)> {
    sink.rejected
        .iter()
        .map(|r| (r.record.clone(), r.reason.clone()))
        .collect()
}

fn write(path: &Path, bytes: impl AsRef<[u8]>) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(path, bytes).unwrap();
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// A regular file of `zeros` zero bytes (sparse: it takes no disk) followed by `tail`.
fn zeros_then(path: &Path, zeros: usize, tail: &[u8]) {
    let mut file = std::fs::File::create(path).unwrap();
    file.set_len(zeros as u64).unwrap();
    file.seek(SeekFrom::End(0)).unwrap();
    file.write_all(tail).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Silent loss.

const SCENE_GRAPHS: &str = r#"[
  {"image_id": 1, "objects": [{"object_id": 10, "x": 1, "y": 2, "w": 3, "h": 4, "names": ["dog"]}], "relationships": []},
  {"image_id": 2, "objects": [], "relationships": []},
  {"image_id": 3, "objects": [], "relationships": []}
]"#;

/// A truncated `image_data.json` beside `scene_graphs.json`: the images whose entries were cut
/// off are rejected with a reason naming the sizes file and where it breaks, not accepted with
/// their sizes silently missing.
#[test]
fn truncated_image_data_rejects_the_scene_graphs_it_cannot_size() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("scene_graphs.json"), SCENE_GRAPHS);
    let full = r#"[{"image_id": 1, "width": 800, "height": 600}, {"image_id": 2, "width": 640, "height": 480}]"#;
    // Cut inside the second entry, as a copy that stopped early leaves it.
    write(&dir.path().join("image_data.json"), &full[..60]);

    let sink = read(Format::VisualGenome, &dir.path().join("scene_graphs.json"));
    assert_eq!((sink.accepted, sink.rejected.len()), (1, 2));
    let Row::SceneGraph(first) = &sink.rows[0] else {
        panic!("expected a scene graph")
    };
    assert_eq!(
        (first.image_id.as_str(), first.width, first.height),
        ("1", Some(800), Some(600))
    );
    for ((record, reason), image) in reasons(&sink).iter().zip(["2", "3"]) {
        assert!(record.starts_with('['), "{record}");
        assert!(
            reason.contains(&format!("image {image} has no size")),
            "{reason}"
        );
        assert!(reason.contains("image_data.json"), "{reason}");
        assert!(reason.contains("breaks off at byte"), "{reason}");
    }

    // A whole directory: the sizes file's break is its own rejected record as well.
    let sink = read(Format::VisualGenome, dir.path());
    let scene_graphs = sink
        .rows
        .iter()
        .filter(|r| matches!(r, Row::SceneGraph(_)))
        .count();
    assert_eq!(scene_graphs, 1);
    assert_eq!((sink.accepted, sink.rejected.len()), (2, 3));
}

/// An entry of `image_data.json` that does not read rejects the scene graph of its image with
/// the entry's reason; images the sound file does not list keep no size, as before.
#[test]
fn a_broken_image_data_entry_rejects_its_scene_graph() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("scene_graphs.json"), SCENE_GRAPHS);
    write(
        &dir.path().join("image_data.json"),
        r#"[{"image_id": 1, "width": 800, "height": 600}, {"image_id": 2, "width": -5, "height": 480}]"#,
    );
    let sink = read(Format::VisualGenome, &dir.path().join("scene_graphs.json"));
    assert_eq!(sink.accepted, 2, "{:?}", sink.rejected);
    let rejected = reasons(&sink);
    assert_eq!(rejected.len(), 1);
    assert!(
        rejected[0].1.contains("image 2's entry") && rejected[0].1.contains("pixel size"),
        "{:?}",
        rejected[0]
    );
    let sizes: Vec<(String, Option<i32>)> = sink
        .rows
        .iter()
        .filter_map(|r| match r {
            Row::SceneGraph(g) => Some((g.image_id.clone(), g.width)),
            _ => None,
        })
        .collect();
    assert_eq!(
        sizes,
        [("1".to_string(), Some(800)), ("3".to_string(), None)]
    );
}

const CAPTION: &str = "[/EN#1/people A man] rides [/EN#2/other a horse] .";

/// Sentence files that are a link to a missing file, a link loop or a FIFO are rejected records
/// naming the file and what is wrong, beside the images that read.
#[test]
fn unreadable_flickr_sentence_files_are_rejected_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let sentences = dir.path().join("Sentences");
    write(&sentences.join("1.txt"), format!("{CAPTION}\n"));
    std::os::unix::fs::symlink(dir.path().join("missing.txt"), sentences.join("2.txt")).unwrap();
    std::os::unix::fs::symlink(sentences.join("3.txt"), sentences.join("3.txt")).unwrap();
    mkfifo(&sentences.join("4.txt"));

    let sink = read_within(
        Format::Flickr30kEntities,
        dir.path(),
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(sink.accepted, 1);
    let rejected: Vec<(String, String, String)> = sink
        .rejected
        .iter()
        .map(|r| (r.source_file.clone(), r.record.clone(), r.reason.clone()))
        .collect();
    assert_eq!(rejected.len(), 3, "{rejected:?}");
    let expect = [
        ("2.txt", "does not exist"),
        ("3.txt", "symbolic link loop"),
        ("4.txt", "not a regular file (a FIFO)"),
    ];
    for ((file, record, reason), (name, why)) in rejected.iter().zip(expect) {
        assert!(file.ends_with(name), "{file}");
        assert_eq!(record, "sentence file");
        assert!(reason.contains(why), "{name}: {reason}");
    }
}

/// PENMAN with old Mac line ends (`\r` only) reads as the same file with `\n`; so does a mix.
#[test]
fn penman_with_carriage_return_line_ends_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let unix = "# ::id img.0\n# ::snt A dog .\n(d / dog)\n\n# ::id img.1\n(r / run-01\n   :ARG0 (c / cat))\n";
    let mut graphs = Vec::new();
    for (name, text) in [
        ("lf.txt", unix.to_string()),
        ("cr.txt", unix.replace('\n', "\r")),
        ("crlf.txt", unix.replace('\n', "\r\n")),
    ] {
        let path = dir.path().join(name);
        write(&path, &text);
        let sink = read(Format::Penman, &path);
        assert_eq!((sink.accepted, sink.rejected.len()), (2, 0), "{name}");
        let ids: Vec<(String, Option<String>)> = sink
            .rows
            .iter()
            .map(|r| match r {
                Row::Amr(a) => (a.graph_id.clone(), a.sentence.clone()),
                other => panic!("{other:?}"),
            })
            .collect();
        graphs.push(ids);
    }
    assert_eq!(
        graphs[0][0],
        ("img.0".to_string(), Some("A dog .".to_string()))
    );
    assert_eq!(graphs[0], graphs[1]);
    assert_eq!(graphs[0], graphs[2]);
}

/// A UTF-8 byte order mark at the start of a Flickr sentence file, a PENMAN file or a JSON input
/// is skipped; the first record reads like the others.
#[test]
fn byte_order_marks_are_skipped() {
    const BOM: &str = "\u{feff}";
    let dir = tempfile::tempdir().unwrap();

    let sentences = dir.path().join("flickr/Sentences/7.txt");
    write(&sentences, format!("{BOM}{CAPTION}\n{CAPTION}\n"));
    let sink = read(Format::Flickr30kEntities, &dir.path().join("flickr"));
    assert_eq!(
        (sink.accepted, sink.rejected.len()),
        (2, 0),
        "{:?}",
        sink.rejected
    );
    let Row::Caption(c) = &sink.rows[0] else {
        panic!("expected a caption")
    };
    assert_eq!(c.text, "A man rides a horse .");

    let penman = dir.path().join("g.txt");
    write(&penman, format!("{BOM}# ::id img.0\n(d / dog)\n"));
    let sink = read(Format::Penman, &penman);
    assert_eq!(
        (sink.accepted, sink.rejected.len()),
        (1, 0),
        "{:?}",
        sink.rejected
    );
    let Row::Amr(a) = &sink.rows[0] else {
        panic!("expected an AMR")
    };
    assert_eq!(a.graph_id, "img.0");

    for (name, format, doc) in [
        (
            "captions_val2014.json",
            Format::CocoCaptions,
            r#"{"images": [{"id": 1}], "annotations": [{"id": 5, "image_id": 1, "caption": "a dog"}]}"#,
        ),
        (
            "scene_graphs.json",
            Format::VisualGenome,
            r#"[{"image_id": 1, "objects": [], "relationships": []}]"#,
        ),
    ] {
        let path = dir.path().join("json").join(name);
        write(&path, format!("{BOM}{doc}"));
        let sink = read(format, &path);
        assert!(
            sink.accepted >= 1 && sink.rejected.is_empty(),
            "{name}: {:?}",
            sink.rejected
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Hangs and unbounded memory.

/// An annotation file nested 600,000 levels deep (4.2 MB) is rejected at the depth limit in
/// well under a second; it once took minutes, quadratic in the depth.
#[test]
fn deeply_nested_flickr_xml_is_rejected_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let depth = 600_000;
    let mut xml = String::from("<annotation><size><width>5</width><height>5</height></size>");
    xml.push_str(&"<a>".repeat(depth));
    xml.push_str(&"</a>".repeat(depth));
    xml.push_str("</annotation>");
    let path = dir.path().join("Annotations/9.xml");
    write(&path, &xml);
    let sink = read_within(Format::Flickr30kEntities, &path, Duration::from_secs(20)).unwrap();
    let rejected = reasons(&sink);
    assert_eq!(sink.accepted, 0);
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].0, "annotation file");
    assert!(
        rejected[0].1.contains("nested deeper than 64"),
        "{}",
        rejected[0].1
    );
}

/// A FIFO given as input is refused at once as "not a regular file" by every reader, instead of
/// blocking until a writer opens it.
#[test]
fn a_fifo_as_input_is_an_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    for (name, format) in [
        ("captions_val2014.json", Format::CocoCaptions),
        ("instances_val2014.json", Format::CocoInstances),
        ("entities.json", Format::CocoEntities),
        ("scene_graphs.json", Format::VisualGenome),
        ("graphs.jsonl", Format::Gbc),
        ("graphs.json", Format::Gbc),
        ("graphs.parquet", Format::Gbc),
        ("amrs.txt", Format::Penman),
        ("captions.parquet", Format::Capflow),
    ] {
        let fifo = dir.path().join(name);
        mkfifo(&fifo);
        let outcome = read_within(format, &fifo, Duration::from_secs(20));
        let error = outcome.err().map(|e| (e.to_string(), e.exit_code()));
        let (message, code) = error.unwrap_or_else(|| panic!("{name}: a FIFO was read"));
        assert!(
            message.contains("not a regular file (a FIFO)"),
            "{name}: {message}"
        );
        assert!(message.contains(name), "{name}: {message}");
        assert_eq!(code, 4, "{name}: unreadable input");
    }
}

/// `capflow ingest` on a FIFO exits with 4 (an unreadable input) and says why.
#[test]
fn ingest_of_a_fifo_exits_4() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("amrs.txt");
    mkfifo(&fifo);
    let mut child = Command::new(common::capflow_bin())
        .args(["ingest", "penman"])
        .arg(&fifo)
        .arg("--out")
        .arg(dir.path().join("out"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("capflow ingest blocked on a FIFO");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");
}

/// `/dev/zero` named as a GBC or PENMAN input (here through a link with the right extension) is
/// refused as a character device instead of being read for ever.
#[test]
fn a_device_as_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (name, format) in [("zero.jsonl", Format::Gbc), ("zero.txt", Format::Penman)] {
        let link = dir.path().join(name);
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let error = read_within(format, &link, Duration::from_secs(20))
            .err()
            .unwrap_or_else(|| panic!("{name}: /dev/zero was read"));
        assert!(
            error
                .to_string()
                .contains("not a regular file (a character device)"),
            "{name}: {error}"
        );
    }
}

/// A GBC line or a PENMAN graph of 256 MiB of zero bytes (no line end) is rejected at the
/// 64 MiB record limit, read past without being held, and the records after it are read;
/// memory stays near the limit instead of growing with the line.
#[test]
fn records_past_the_size_limit_are_rejected_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let gbc_record = r#"{"img_url": "https://example.org/a.jpg", "original_caption": "a dog", "short_caption": "a dog", "detail_caption": "a dog", "vertices": [], "edges": []}"#;
    let cases: [(&str, Format, String); 2] = [
        ("big.jsonl", Format::Gbc, format!("\n{gbc_record}\n")),
        (
            "big.txt",
            Format::Penman,
            "\n\n# ::id img.0\n(d / dog)\n".to_string(),
        ),
    ];
    for (name, format, tail) in cases {
        let path = dir.path().join(name);
        zeros_then(&path, 256 * MIB, tail.as_bytes());
        let (sink, peak) = peak_bytes(|| read(format, &path));
        let first = sink.rejected.first().expect("the zeros are rejected");
        assert!(
            first.reason.contains("larger than the 64 MiB record limit"),
            "{name}: {}",
            first.reason
        );
        assert_eq!(
            (first.line, first.byte_offset),
            (Some(1), Some(0)),
            "{name}"
        );
        assert!(peak < 160 * MIB, "{name}: {} MiB at once", peak / MIB);
        // The record after the zeros is read: one more record, whatever it holds.
        assert_eq!(sink.accepted + sink.rejected.len() as u64, 2, "{name}");
        if format == Format::Penman {
            assert_eq!(sink.accepted, 1, "{name}: the graph after the zeros");
        }
    }
}

/// A COCO annotation whose segmentation is 12 MB of polygon coordinates is read without
/// building the polygon: memory stays near the record's own bytes.
#[test]
fn a_huge_coco_segmentation_is_not_held_as_values() {
    let dir = tempfile::tempdir().unwrap();
    let points = 3_000_000;
    let mut polygon = String::with_capacity(points * 4);
    for i in 0..points {
        if i > 0 {
            polygon.push(',');
        }
        polygon.push_str(["1.5", "22", "7"][i % 3]);
    }
    let doc = format!(
        r#"{{"images": [{{"id": 1, "width": 640, "height": 480}}],
            "annotations": [{{"id": 3, "image_id": 1, "category_id": 18, "area": 50.0,
                              "segmentation": [[{polygon}]], "bbox": [10, 20, 30, 40], "iscrowd": 0}}],
            "categories": [{{"id": 18, "name": "dog"}}]}}"#
    );
    let path = dir.path().join("instances_val2017.json");
    write(&path, &doc);
    drop((doc, polygon));
    let (sink, peak) = peak_bytes(|| read(Format::CocoInstances, &path));
    assert_eq!(
        (sink.accepted, sink.rejected.len()),
        (3, 0),
        "{:?}",
        sink.rejected
    );
    let detection = sink.rows.iter().find_map(|r| match r {
        Row::Detection(d) => Some(d),
        _ => None,
    });
    assert_eq!(detection.map(|d| d.bbox.x2), Some(40.0));
    // The record's bytes are held once (below 32 MiB with growth); 3 M JSON values take 96 MB.
    assert!(peak < 40 * MIB, "{} MiB at once", peak / MIB);
}

// ---------------------------------------------------------------------------------------------
// Values.

/// COCO boxes: one whose far corner overflows to infinity, one with no width, one wholly off its
/// image are rejected with the reason; one that runs past the image's edge is kept as written.
#[test]
fn coco_boxes_that_cover_nothing_or_overflow_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let doc = r#"{"images": [{"id": 1, "width": 640, "height": 480}],
      "annotations": [
        {"id": 1, "image_id": 1, "category_id": 7, "bbox": [1e308, 1e308, 1e308, 1e308]},
        {"id": 2, "image_id": 1, "category_id": 7, "bbox": [10, 10, 0, 5]},
        {"id": 3, "image_id": 1, "category_id": 7, "bbox": [700, 10, 5, 5]},
        {"id": 4, "image_id": 1, "category_id": 7, "bbox": [630, 470, 20, 15]},
        {"id": 5, "image_id": 1, "category_id": 7, "bbox": [1, 2, 3, 4]}],
      "categories": [{"id": 7, "name": "cat"}]}"#;
    let path = dir.path().join("instances_val2017.json");
    write(&path, doc);
    let sink = read(Format::CocoInstances, &path);
    // 1 image, 5 annotations, 1 category.
    assert_eq!(sink.accepted + sink.rejected.len() as u64, 7);
    let rejected = reasons(&sink);
    let expect = [
        ("annotations[0]", "largest representable coordinate"),
        ("annotations[1]", "zero width or height"),
        ("annotations[2]", "outside the 640 x 480 image"),
    ];
    assert_eq!(rejected.len(), expect.len(), "{rejected:?}");
    for ((record, reason), (at, why)) in rejected.iter().zip(expect) {
        assert_eq!(record, at);
        assert!(reason.contains(why), "{at}: {reason}");
    }
    let boxes: Vec<(String, [f64; 4])> = sink
        .rows
        .iter()
        .filter_map(|r| match r {
            Row::Detection(d) => Some((
                d.detection_id.clone(),
                [d.bbox.x1, d.bbox.y1, d.bbox.x2, d.bbox.y2],
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        boxes,
        [
            ("4".to_string(), [630.0, 470.0, 650.0, 485.0]),
            ("5".to_string(), [1.0, 2.0, 4.0, 6.0])
        ]
    );
    for (_, b) in &boxes {
        assert!(b.iter().all(|v| v.is_finite()));
    }
}

/// A Visual Genome object whose far corner overflows rejects its image with the reason.
#[test]
fn visual_genome_boxes_that_overflow_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("scene_graphs.json");
    write(
        &path,
        r#"[{"image_id": 1, "objects": [{"object_id": 1, "x": 1e308, "y": 0, "w": 1e308, "h": 1, "names": ["sky"]}], "relationships": []},
            {"image_id": 2, "objects": [{"object_id": 2, "x": 0, "y": 0, "w": 1, "h": 1, "names": ["cup"]}], "relationships": []}]"#,
    );
    let sink = read(Format::VisualGenome, &path);
    assert_eq!(sink.accepted, 1);
    let rejected = reasons(&sink);
    assert_eq!(rejected.len(), 1);
    assert!(
        rejected[0].1.contains("largest representable coordinate"),
        "{}",
        rejected[0].1
    );
}
