//! Worker and process configuration, built from capflow's own command line.
//!
//! timely's `Config::from_args` is not used: it rejects flags it does not know and takes `-h` for
//! its hostfile, which would steal `--help`. capflow spells the hostfile `--hostfile`.

use std::path::PathBuf;

use crate::error::{Error, Result};

/// How many workers and processes a run uses.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct ClusterOptions {
    /// Worker threads per process.
    #[arg(short = 'w', long = "workers", default_value_t = 1)]
    pub workers: usize,
    /// Number of processes in the cluster (each runs this same command with its own --process).
    #[arg(short = 'n', long = "processes", default_value_t = 1)]
    pub processes: usize,
    /// This process's index, 0-based.
    #[arg(short = 'p', long = "process", default_value_t = 0)]
    pub process: usize,
    /// File with one `host:port` per line, one line per process (needed when --processes > 1).
    #[arg(long = "hostfile")]
    pub hostfile: Option<PathBuf>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            workers: 1,
            processes: 1,
            process: 0,
            hostfile: None,
        }
    }
}

impl ClusterOptions {
    /// The timely configuration these options describe.
    pub fn timely_config(&self) -> Result<timely::Config> {
        if self.workers == 0 {
            return Err(Error::Usage("--workers must be at least 1".into()));
        }
        if self.processes == 0 || self.process >= self.processes {
            return Err(Error::Usage(format!(
                "--process {} is out of range for --processes {}",
                self.process, self.processes
            )));
        }
        let communication = if self.processes == 1 {
            timely::CommunicationConfig::Process(self.workers)
        } else {
            let hostfile = self.hostfile.as_ref().ok_or_else(|| {
                Error::Usage(
                    "--processes > 1 needs --hostfile with one host:port per process".into(),
                )
            })?;
            let addresses = read_hostfile(hostfile)?;
            if addresses.len() != self.processes {
                return Err(Error::Usage(format!(
                    "{}: lists {} addresses but --processes is {}",
                    hostfile.display(),
                    addresses.len(),
                    self.processes
                )));
            }
            timely::CommunicationConfig::Cluster {
                threads: self.workers,
                process: self.process,
                addresses,
                report: false,
                zerocopy: false,
            }
        };
        Ok(timely::Config {
            communication,
            worker: timely::WorkerConfig::default(),
        })
    }
}

fn read_hostfile(path: &PathBuf) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let mut addresses = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !line.contains(':') {
            return Err(Error::record(
                path.display().to_string(),
                format!("line {}", i + 1),
                format!("expected host:port, found `{line}`"),
            ));
        }
        addresses.push(line.to_string());
    }
    Ok(addresses)
}
