//! A text-to-AMR model's answers kept by caption text, so that a rerun with `--state` never
//! sends a caption to the model twice.
//!
//! ```text
//! STATE/text-to-amr/<model>/<file>.arrow   Arrow IPC files: key (SHA-256 of the caption
//!                                          text, 32 bytes), penman (the model's answer)
//! ```
//!
//! `<model>` is a digest of the adapter's command, environment and working directory: another
//! model (or another version of the command line) starts an empty cache. Each run that asked
//! the model anything adds one file with the new answers; once a model's directory holds
//! [`COMPACT_FILES`] files, a run rewrites them as one. A model whose weights change under the
//! same command keeps its old answers: remove the directory to start afresh. A file that cannot
//! be read is skipped with a warning (its captions are parsed again).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arrow::array::{Array, FixedSizeBinaryArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::ipc::reader::FileReader;
use arrow::ipc::writer::FileWriter;
use sha2::{Digest, Sha256};

use super::{AdapterConfig, TextToAmr};
use crate::error::{Error, Result};

/// The state's directory of text-to-AMR caches.
pub const CACHE_DIR: &str = "text-to-amr";

/// A model directory holding this many files is rewritten as one file by the next save.
pub const COMPACT_FILES: usize = 16;

type Key = [u8; 32];

/// The answers of one text-to-AMR model: those read from the state, and those got since.
pub struct ParseCache {
    dir: PathBuf,
    /// The files read when the cache was opened (a compaction replaces exactly these).
    files: Vec<PathBuf>,
    answers: Mutex<Answers>,
}

#[derive(Default)]
struct Answers {
    known: HashMap<Key, String>,
    fresh: Vec<Key>,
}

impl ParseCache {
    /// Opens the cache of the model `adapter` runs, under `state` (a `--state` directory),
    /// reading every answer kept there.
    pub fn open(state: &Path, adapter: &AdapterConfig) -> Result<ParseCache> {
        let dir = state.join(CACHE_DIR).join(model_key(adapter));
        let mut files = Vec::new();
        let mut answers = Answers::default();
        if dir.is_dir() {
            let entries = std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))?;
            for entry in entries {
                let path = entry.map_err(|e| Error::io(&dir, e))?.path();
                if path.extension().is_some_and(|e| e == "arrow") {
                    files.push(path);
                }
            }
            files.sort();
            for path in &files {
                if let Err(e) = read_answers(path, &mut answers.known) {
                    crate::cli::out::diagnostic!(
                        "warning: skipping the text-to-AMR cache file {}: {e}",
                        path.display()
                    );
                }
            }
        }
        Ok(ParseCache {
            dir,
            files,
            answers: Mutex::new(answers),
        })
    }

    /// How many captions have an answer.
    pub fn len(&self) -> usize {
        self.answers.lock().map_or(0, |a| a.known.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the answers got since the cache was opened to a new file of the model's
    /// directory (all of them into one file, replacing the others, once there are
    /// [`COMPACT_FILES`]); returns how many new answers it kept.
    pub fn save(&self) -> Result<usize> {
        let answers = self
            .answers
            .lock()
            .map_err(|_| Error::Config("the text-to-AMR cache was poisoned".into()))?;
        if answers.fresh.is_empty() {
            return Ok(0);
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        let compact = self.files.len() + 1 >= COMPACT_FILES;
        let keys: Vec<&Key> = if compact {
            let mut all: Vec<&Key> = answers.known.keys().collect();
            all.sort();
            all
        } else {
            answers.fresh.iter().collect()
        };
        let name = format!(
            "{}-{}.arrow",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
            std::process::id()
        );
        let path = self.dir.join(&name);
        let partial = self.dir.join(format!(".{name}.partial"));
        write_answers(&partial, &keys, &answers.known)?;
        std::fs::rename(&partial, &path).map_err(|e| Error::io(&path, e))?;
        if compact {
            for old in &self.files {
                std::fs::remove_file(old).map_err(|e| Error::io(old, e))?;
            }
        }
        Ok(answers.fresh.len())
    }
}

/// The model part of a cache's path: a digest of how the model is run.
fn model_key(adapter: &AdapterConfig) -> String {
    let identity = serde_json::json!({
        "command": adapter.command,
        "env": adapter.env,
        "working_dir": adapter.working_dir,
    });
    let digest = Sha256::digest(identity.to_string().as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

fn caption_key(text: &str) -> Key {
    Sha256::digest(text.as_bytes()).into()
}

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::FixedSizeBinary(32), false),
        Field::new("penman", DataType::Utf8, false),
    ]))
}

fn read_answers(path: &Path, known: &mut HashMap<Key, String>) -> Result<()> {
    let corrupt = |e: arrow::error::ArrowError| Error::corrupt(path, "arrow", e);
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let reader = FileReader::try_new(std::io::BufReader::new(file), None).map_err(corrupt)?;
    if reader.schema() != schema() {
        return Err(Error::invalid(
            path.display().to_string(),
            "not a text-to-AMR cache file (its columns are not key, penman)",
        ));
    }
    for batch in reader {
        let batch = batch.map_err(corrupt)?;
        let (Some(keys), Some(graphs)) = (
            batch
                .column(0)
                .as_any()
                .downcast_ref::<FixedSizeBinaryArray>(),
            batch.column(1).as_any().downcast_ref::<StringArray>(),
        ) else {
            continue;
        };
        for row in 0..batch.num_rows() {
            if let Ok(key) = Key::try_from(keys.value(row)) {
                known.insert(key, graphs.value(row).to_string());
            }
        }
    }
    Ok(())
}

fn write_answers(path: &Path, keys: &[&Key], known: &HashMap<Key, String>) -> Result<()> {
    let arrow = |e: arrow::error::ArrowError| Error::corrupt(path, "arrow", e);
    let key_column =
        FixedSizeBinaryArray::try_from_iter(keys.iter().map(|k| k.as_slice())).map_err(arrow)?;
    let graphs: StringArray = keys
        .iter()
        .map(|k| Some(known.get(*k).map_or("", String::as_str)))
        .collect();
    let batch = RecordBatch::try_new(schema(), vec![Arc::new(key_column), Arc::new(graphs)])
        .map_err(arrow)?;
    let file = File::create(path).map_err(|e| Error::io(path, e))?;
    let mut writer =
        FileWriter::try_new(std::io::BufWriter::new(file), &schema()).map_err(arrow)?;
    writer.write(&batch).map_err(arrow)?;
    writer.finish().map_err(arrow)?;
    let file = writer.into_inner().map_err(arrow)?;
    file.into_inner()
        .map_err(|e| Error::io(path, e.into_error()))?
        .sync_all()
        .map_err(|e| Error::io(path, e))
}

/// A text-to-AMR model behind a [`ParseCache`]: captions with an answer are not sent again;
/// the others go to the model in one call (each distinct caption once).
pub struct CachedTextToAmr {
    pub cache: Arc<ParseCache>,
    pub model: Arc<dyn TextToAmr>,
}

impl TextToAmr for CachedTextToAmr {
    fn parse_captions(&self, captions: &[String]) -> Result<Vec<String>> {
        let keys: Vec<Key> = captions.iter().map(|c| caption_key(c)).collect();
        let missing: Vec<(Key, String)> = {
            let answers = self
                .cache
                .answers
                .lock()
                .map_err(|_| Error::Config("the text-to-AMR cache was poisoned".into()))?;
            let mut seen = std::collections::HashSet::new();
            keys.iter()
                .zip(captions)
                .filter(|(k, _)| !answers.known.contains_key(*k) && seen.insert(**k))
                .map(|(k, c)| (*k, c.clone()))
                .collect()
        };
        let mut got = HashMap::new();
        if !missing.is_empty() {
            let texts: Vec<String> = missing.iter().map(|(_, c)| c.clone()).collect();
            let graphs = self.model.parse_captions(&texts)?;
            for ((key, _), graph) in missing.into_iter().zip(graphs) {
                got.insert(key, graph);
            }
        }
        let mut answers = self
            .cache
            .answers
            .lock()
            .map_err(|_| Error::Config("the text-to-AMR cache was poisoned".into()))?;
        let graphs = keys
            .iter()
            .map(|k| {
                got.get(k)
                    .or_else(|| answers.known.get(k))
                    .cloned()
                    .unwrap_or_default()
            })
            .collect();
        for (key, graph) in got {
            if answers.known.insert(key, graph).is_none() {
                answers.fresh.push(key);
            }
        }
        Ok(graphs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the captions it is asked to parse; answers `(c / caption :text "<caption>")`.
    #[derive(Default)]
    struct Counting(Mutex<Vec<String>>);

    impl TextToAmr for Counting {
        fn parse_captions(&self, captions: &[String]) -> Result<Vec<String>> {
            self.0.lock().unwrap().extend(captions.iter().cloned());
            Ok(captions
                .iter()
                .map(|c| format!("(c / caption :text \"{c}\")"))
                .collect())
        }
    }

    fn strings(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn a_caption_goes_to_the_model_once_across_reruns() {
        let state = tempfile::tempdir().unwrap();
        let adapter = AdapterConfig::new(["parser", "--model", "a"]);
        let first = Arc::new(Counting::default());
        let cached = CachedTextToAmr {
            cache: Arc::new(ParseCache::open(state.path(), &adapter).unwrap()),
            model: first.clone(),
        };
        let graphs = cached
            .parse_captions(&strings(&["a dog", "a cat", "a dog"]))
            .unwrap();
        assert_eq!(graphs[0], "(c / caption :text \"a dog\")");
        assert_eq!(graphs[1], "(c / caption :text \"a cat\")");
        assert_eq!(graphs[2], graphs[0]);
        // A repeated caption is sent once.
        assert_eq!(*first.0.lock().unwrap(), strings(&["a dog", "a cat"]));
        assert_eq!(cached.cache.save().unwrap(), 2);

        // A rerun asks only for the new caption, and answers the others from the state.
        let second = Arc::new(Counting::default());
        let cached = CachedTextToAmr {
            cache: Arc::new(ParseCache::open(state.path(), &adapter).unwrap()),
            model: second.clone(),
        };
        assert_eq!(cached.cache.len(), 2);
        let graphs = cached
            .parse_captions(&strings(&["a cat", "a bird"]))
            .unwrap();
        assert_eq!(graphs[0], "(c / caption :text \"a cat\")");
        assert_eq!(graphs[1], "(c / caption :text \"a bird\")");
        assert_eq!(*second.0.lock().unwrap(), strings(&["a bird"]));
        assert_eq!(cached.cache.save().unwrap(), 1);

        // Another command line is another model: nothing is reused.
        let other = ParseCache::open(state.path(), &AdapterConfig::new(["parser"])).unwrap();
        assert!(other.is_empty());
        let reopened = ParseCache::open(state.path(), &adapter).unwrap();
        assert_eq!(reopened.len(), 3);
    }

    #[test]
    fn many_files_are_compacted_into_one_and_an_unreadable_one_is_skipped() {
        let state = tempfile::tempdir().unwrap();
        let adapter = AdapterConfig::new(["parser"]);
        for i in 0..COMPACT_FILES + 2 {
            let cached = CachedTextToAmr {
                cache: Arc::new(ParseCache::open(state.path(), &adapter).unwrap()),
                model: Arc::new(Counting::default()),
            };
            cached.parse_captions(&[format!("caption {i}")]).unwrap();
            cached.cache.save().unwrap();
        }
        let dir = state.path().join(CACHE_DIR).join(model_key(&adapter));
        let files = std::fs::read_dir(&dir).unwrap().count();
        // Compacted to one file at the 16th save, then one file per save after it.
        assert_eq!(files, 3, "{files} files");
        std::fs::write(dir.join("0-garbage.arrow"), b"not arrow").unwrap();
        let cache = ParseCache::open(state.path(), &adapter).unwrap();
        assert_eq!(cache.len(), COMPACT_FILES + 2);
    }
}
