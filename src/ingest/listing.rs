//! Compact sorted listings for inputs of millions of files: the names of a directory's files and
//! the ids of a split list, each held as one byte string with an offset per entry.
//!
//! A reader that must visit a directory's files in order of their names has to hold the names
//! until they are sorted. Held as a `PathBuf` and a `String` per file, a million files cost about
//! 250 bytes each with their allocations; here they cost the name's bytes plus 4 bytes, plus
//! 16 when the listing keeps each file's size and modification time.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::FileMeta;
use crate::error::{Error, Result};

/// Entries past this many bytes of names do not fit the offsets (`u32`).
const MAX_BYTES: usize = u32::MAX as usize;

/// Byte strings in one buffer: entry `i` is `bytes[ends[i - 1]..ends[i]]`.
#[derive(Clone, Debug, Default)]
struct Strings {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl Strings {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, i: usize) -> &[u8] {
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        &self.bytes[start..self.ends[i] as usize]
    }

    fn push(&mut self, s: &[u8], what: &dyn std::fmt::Display) -> Result<()> {
        if self.bytes.len() + s.len() > MAX_BYTES {
            return Err(Error::Usage(format!(
                "{what}: more than {MAX_BYTES} bytes of names, too many to list"
            )));
        }
        self.bytes.extend_from_slice(s);
        self.ends.push(self.bytes.len() as u32);
        Ok(())
    }

    /// The entries in the order of `order`.
    fn permuted(&self, order: &[u32]) -> Strings {
        let mut out = Strings {
            bytes: Vec::with_capacity(order.iter().map(|&i| self.get(i as usize).len()).sum()),
            ends: Vec::with_capacity(order.len()),
        };
        for &i in order {
            out.bytes.extend_from_slice(self.get(i as usize));
            out.ends.push(out.bytes.len() as u32);
        }
        out
    }
}

/// What a directory entry named like a dataset file is: `Ok(Some(meta))` a regular file (after
/// following links), `Ok(None)` a directory (not a dataset file), `Err(problem)` an entry
/// that should be a file but cannot be read as one.
fn classify_entry(path: &Path) -> std::result::Result<Option<std::fs::Metadata>, String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(Some(m)),
        Ok(m) if m.is_dir() => Ok(None),
        Ok(m) => Err(format!(
            "not a regular file ({}); capflow reads regular files only",
            super::describe_file_type(&m.file_type())
        )),
        Err(e) => {
            let link = std::fs::read_link(path).ok();
            Err(match (link, e.raw_os_error()) {
                (Some(_), Some(libc::ELOOP)) => {
                    "a symbolic link loop: the link never reaches a file".to_string()
                }
                (Some(target), _) if e.kind() == std::io::ErrorKind::NotFound => format!(
                    "a symbolic link to {}, which does not exist",
                    target.display()
                ),
                _ => format!("unreadable: {e}"),
            })
        }
    }
}

/// The stem of a file name (as [`Path::file_stem`] gives it), as text.
fn stem_of(name: &[u8]) -> Cow<'_, str> {
    let stem = Path::new(OsStr::from_bytes(name))
        .file_stem()
        .map_or(name, |s| s.as_bytes());
    String::from_utf8_lossy(stem)
}

/// The entries of one directory whose extension is `extension` (any case) and that are not
/// directories, sorted by stem; of two with the same stem (`a.txt`, `a.TXT`) the first by name
/// is kept. An entry that cannot be read as a regular file is listed with its problem, so that
/// it is not lost silently.
#[derive(Clone, Debug, Default)]
pub struct DirFiles {
    dir: PathBuf,
    names: Strings,
    /// Each file's size and modification time, when listed with them.
    metas: Vec<FileMeta>,
    /// Why an entry named like one of the files cannot be read as one, by its position.
    problems: BTreeMap<u32, String>,
}

impl DirFiles {
    /// Lists `dir`; with `stamped`, every file's size and modification time too (a link is
    /// followed).
    pub fn list(dir: &Path, extension: &str, stamped: bool) -> Result<DirFiles> {
        let mut names = Strings::default();
        let mut metas = Vec::new();
        let mut problems: Vec<(u32, String)> = Vec::new();
        let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(dir, e))?;
            let name = entry.file_name();
            let matches = Path::new(&name)
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case(extension));
            if !matches || Path::new(&name).file_stem().is_none() {
                continue;
            }
            // A plain entry's type needs no lookup; links and the stamped listing need one.
            // By its path, following a link: the file's stamp, or why it cannot be read as
            // one; `None` for a directory.
            let classified = || match classify_entry(&dir.join(&name)) {
                Ok(Some(m)) => Some((stamped.then(|| FileMeta::of(&m)), None)),
                Ok(None) => None,
                Err(problem) => Some((None, Some(problem))),
            };
            let (meta, problem) = match entry.file_type() {
                Ok(t) if t.is_file() && !stamped => (None, None),
                // A plain file's stamp is looked up from the open directory, by its name alone.
                Ok(t) if t.is_file() => match entry.metadata() {
                    Ok(m) => (Some(FileMeta::of(&m)), None),
                    Err(_) => match classified() {
                        Some(classified) => classified,
                        None => continue,
                    },
                },
                Ok(t) if t.is_dir() => continue,
                _ => match classified() {
                    Some(classified) => classified,
                    None => continue,
                },
            };
            if let Some(problem) = problem {
                problems.push((names.len() as u32, problem));
            }
            names.push(name.as_bytes(), &dir.display())?;
            if stamped {
                metas.push(meta.unwrap_or(FileMeta {
                    size: 0,
                    modified_ns: None,
                }));
            }
        }
        let mut order: Vec<u32> = (0..names.len() as u32).collect();
        {
            let stems: Vec<Cow<str>> = (0..names.len()).map(|i| stem_of(names.get(i))).collect();
            order.sort_unstable_by(|&a, &b| {
                let (a, b) = (a as usize, b as usize);
                (stems[a].cmp(&stems[b])).then_with(|| names.get(a).cmp(names.get(b)))
            });
            order.dedup_by(|b, a| stems[*a as usize] == stems[*b as usize]);
        }
        let mut position = vec![u32::MAX; names.len()];
        for (at, &i) in order.iter().enumerate() {
            position[i as usize] = at as u32;
        }
        let problems = problems
            .into_iter()
            .filter(|(i, _)| position[*i as usize] != u32::MAX)
            .map(|(i, problem)| (position[i as usize], problem))
            .collect();
        Ok(DirFiles {
            dir: dir.to_path_buf(),
            problems,
            metas: match stamped {
                true => order.iter().map(|&i| metas[i as usize]).collect(),
                false => Vec::new(),
            },
            names: names.permuted(&order),
        })
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The stem of file `i`: the image id of a Flickr30k Entities file.
    pub fn stem(&self, i: usize) -> Cow<'_, str> {
        stem_of(self.names.get(i))
    }

    pub fn path(&self, i: usize) -> PathBuf {
        self.dir.join(OsStr::from_bytes(self.names.get(i)))
    }

    /// File `i`'s size and modification time, when the directory was listed with them and
    /// the file could be read.
    pub fn meta(&self, i: usize) -> Option<FileMeta> {
        match self.problem(i) {
            Some(_) => None,
            None => self.metas.get(i).copied(),
        }
    }

    /// Why entry `i` cannot be read as a file (a link to nothing, a link loop, a FIFO), if so.
    pub fn problem(&self, i: usize) -> Option<&str> {
        self.problems.get(&(i as u32)).map(String::as_str)
    }
}

/// A map from ids to small values, sorted by id for lookups by binary search.
#[derive(Clone, Debug)]
pub struct IdMap<T> {
    ids: Strings,
    values: Vec<T>,
}

impl<T: Copy> IdMap<T> {
    /// The map of `entries`; of an id given more than once, the last value is kept.
    pub fn new<'a>(entries: impl IntoIterator<Item = (&'a str, T)>) -> Result<IdMap<T>> {
        let mut ids = Strings::default();
        let mut values = Vec::new();
        for (id, value) in entries {
            ids.push(id.as_bytes(), &"an id list")?;
            values.push(value);
        }
        let mut order: Vec<u32> = (0..ids.len() as u32).collect();
        // Stable, so equal ids keep their order and the last of each run is the latest.
        order.sort_by(|&a, &b| ids.get(a as usize).cmp(ids.get(b as usize)));
        let mut last: Vec<u32> = Vec::with_capacity(order.len());
        for i in order {
            match last.last_mut() {
                Some(l) if ids.get(*l as usize) == ids.get(i as usize) => *l = i,
                _ => last.push(i),
            }
        }
        Ok(IdMap {
            values: last.iter().map(|&i| values[i as usize]).collect(),
            ids: ids.permuted(&last),
        })
    }

    pub fn get(&self, id: &str) -> Option<T> {
        let (mut lo, mut hi) = (0, self.ids.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.ids.get(mid).cmp(id.as_bytes()) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(self.values[mid]),
            }
        }
        None
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl<T> Default for IdMap<T> {
    fn default() -> Self {
        IdMap {
            ids: Strings::default(),
            values: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_sorted_by_stem_and_filtered_by_extension() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "b.txt", "a.TXT", "a.txt", "c.xml", "10.txt", "9.txt", ".txt",
        ] {
            std::fs::write(dir.path().join(name), name).unwrap();
        }
        std::fs::create_dir(dir.path().join("d.txt")).unwrap();
        for stamped in [false, true] {
            let files = DirFiles::list(dir.path(), "txt", stamped).unwrap();
            let stems: Vec<String> = (0..files.len()).map(|i| files.stem(i).into()).collect();
            // `.txt` has no extension (its stem is `.txt`), `d.txt` is a directory, and of
            // `a.TXT` and `a.txt` the first by name is kept.
            assert_eq!(stems, ["10", "9", "a", "b"]);
            assert_eq!(files.path(2), dir.path().join("a.TXT"));
            assert_eq!(files.meta(3).map(|m| m.size), stamped.then_some(5));
        }
    }

    #[test]
    fn id_map_finds_every_id_and_keeps_the_last_value() {
        let entries = [("7", 0u8), ("10", 1), ("7", 2), ("", 1), ("abc", 0)];
        let map = IdMap::new(entries).unwrap();
        assert_eq!(map.len(), 4);
        assert_eq!(map.get("7"), Some(2));
        assert_eq!(map.get("10"), Some(1));
        assert_eq!(map.get(""), Some(1));
        assert_eq!(map.get("abc"), Some(0));
        assert_eq!(map.get("ab"), None);
        assert_eq!(map.get("8"), None);
        assert_eq!(IdMap::<u8>::default().get("7"), None);
    }
}
