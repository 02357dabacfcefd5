//! Worker and process configuration, built from capflow's own command line.
//!
//! timely's `Config::from_args` is not used: it rejects flags it does not know and takes `-h` for
//! its hostfile, which would steal `--help`. capflow spells the hostfile `--hostfile`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::vec::Map;
use timely::dataflow::operators::{Exchange, Input, Probe};
use timely::dataflow::InputHandle;

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
        // The hostfile is configuration: a line that is not `host:port` is a configuration
        // error naming the file and line, found before any process tries to connect.
        let well_formed = line
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !well_formed {
            return Err(Error::Config(format!(
                "{}, line {}: expected host:port (a port from 0 to 65535), found `{line}`",
                path.display(),
                i + 1
            )));
        }
        addresses.push(line.to_string());
    }
    Ok(addresses)
}

impl ClusterOptions {
    /// The buckets this process writes. The read phase sends bucket `b` to worker `b % peers`,
    /// which belongs to process `(b % peers) / workers`.
    pub fn owned_buckets(&self, buckets: usize) -> Vec<usize> {
        let workers = self.workers.max(1);
        let peers = workers * self.processes.max(1);
        (0..buckets)
            .filter(|b| (b % peers) / workers == self.process)
            .collect()
    }
}

/// How long a process waits for its peers to connect before it gives up.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// Guards the start of a cluster computation: if the peers have not all connected within
/// [`CONNECT_TIMEOUT`], the process exits with code 6 (cluster failure) naming the peers that do
/// not answer.
pub struct Connecting {
    done: Arc<AtomicBool>,
}

impl Connecting {
    /// Starts the clock for `phase`; drop the guard once `timely::execute` has returned.
    pub fn start(cluster: &ClusterOptions, phase: &'static str) -> Option<Connecting> {
        if cluster.processes <= 1 {
            return None;
        }
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let process = cluster.process;
        let addresses = cluster
            .hostfile
            .as_ref()
            .and_then(|h| read_hostfile(h).ok())
            .unwrap_or_default();
        std::thread::spawn(move || {
            let started = Instant::now();
            while started.elapsed() < CONNECT_TIMEOUT {
                if flag.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if flag.load(Ordering::SeqCst) {
                return;
            }
            // This process connects to the lower-numbered processes: probe them. The higher-
            // numbered ones connect to it, so those that have not are named as a group.
            let silent: Vec<String> = addresses
                .iter()
                .enumerate()
                .take(process)
                .filter(|(_, address)| !answers(address))
                .map(|(k, address)| format!("process {k} ({address})"))
                .collect();
            let higher: Vec<String> = addresses
                .iter()
                .enumerate()
                .skip(process + 1)
                .map(|(k, address)| format!("process {k} ({address})"))
                .collect();
            let who = if !silent.is_empty() {
                format!("{} does not answer", silent.join(", "))
            } else if higher.len() == 1 {
                format!("{} did not connect", higher[0])
            } else {
                format!("not all of {} connected", higher.join(", "))
            };
            crate::cli::out::diagnostic!(
                "error: capflow process {process}: the cluster did not start its {phase} within {} s: {who}; stopping, {}",
                CONNECT_TIMEOUT.as_secs(),
                crate::export::abort::abandon()
            );
            std::process::exit(6);
        });
        Some(Connecting { done })
    }
}

impl Drop for Connecting {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
    }
}

fn answers(address: &str) -> bool {
    use std::net::ToSocketAddrs;
    let Ok(mut resolved) = address.to_socket_addrs() else {
        return false;
    };
    resolved.any(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_ok())
}

/// Makes a lost peer end this process at once with a message naming it. timely's network
/// threads (`timely:recv-K`, `timely:send-K`, K the peer process) panic when a connection
/// breaks; without this hook the workers could wait forever for the dead peer's progress.
pub fn watch_peers(process: usize) {
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".to_string());
        let thread = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string();
        let peer = thread
            .strip_prefix("timely:recv-")
            .or_else(|| thread.strip_prefix("timely:send-"));
        // Staging directories and the lock go first: exiting runs no destructor.
        let outcome = crate::export::abort::abandon();
        match peer {
            Some(k) => crate::cli::out::diagnostic!(
                "error: capflow process {process}: lost process {k} ({message}); stopping, {outcome}"
            ),
            None => crate::cli::out::diagnostic!(
                "error: capflow process {process}: {message} (thread {thread}); stopping, {outcome}"
            ),
        }
        std::process::exit(6);
    }));
}

/// Sends `payload` from every process to the first. Returns every process's payload, in
/// process order, on process 0 and nothing on the others.
pub fn gather_to_first(cluster: &ClusterOptions, payload: String) -> Result<Vec<String>> {
    let received = message_round(cluster, "commit round", vec![(0, payload)])?;
    Ok(received.into_iter().map(|(_, text)| text).collect())
}

/// Sends process 0's `message` to every process and returns it (process 0 passes `Some`, the
/// others `None`).
pub fn broadcast_from_first(cluster: &ClusterOptions, message: Option<String>) -> Result<String> {
    let outgoing = message
        .map(|text| {
            (0..cluster.processes.max(1))
                .map(|p| (p, text.clone()))
                .collect()
        })
        .unwrap_or_default();
    message_round(cluster, "commit confirmation", outgoing)?
        .into_iter()
        .next()
        .map(|(_, text)| text)
        .ok_or_else(|| Error::Config("process 0 sent no commit confirmation".into()))
}

/// One round of messages between processes: this process sends each `(process, text)` of
/// `outgoing`, and gets back what the others sent it as `(sender, text)`, in sender order.
fn message_round(
    cluster: &ClusterOptions,
    round: &'static str,
    outgoing: Vec<(usize, String)>,
) -> Result<Vec<(usize, String)>> {
    let config = cluster.timely_config()?;
    let workers = cluster.workers.max(1);
    let process = cluster.process;
    let (sender, receiver) = crossbeam_channel::unbounded::<(usize, String)>();
    let connecting = Connecting::start(cluster, round);
    let guards = timely::execute(config, move |worker| {
        let index = worker.index();
        let out = sender.clone();
        // (target worker, sender process, text); each process's first worker sends and receives.
        let mut input =
            InputHandle::<u64, CapacityContainerBuilder<Vec<(usize, usize, String)>>>::new();
        let probe = worker.dataflow(|scope| {
            scope
                .input_from(&mut input)
                .exchange(|message: &(usize, usize, String)| message.0 as u64)
                .flat_map(move |(_, from, text): (usize, usize, String)| {
                    let _ = out.send((from, text));
                    None::<()>
                })
                .probe()
                .0
        });
        if index % workers == 0 {
            for (to, text) in &outgoing {
                input.send((to * workers, process, text.clone()));
            }
        }
        input.close();
        while !probe.done() {
            worker.step();
        }
    })
    .map_err(|e| Error::Config(format!("starting the {round}: {e}")))?;
    drop(connecting);
    joined(guards, round)?;
    let mut received: Vec<(usize, String)> = receiver.try_iter().collect();
    received.sort_by_key(|m| m.0);
    Ok(received)
}

/// Waits for a round's workers; a worker that failed fails the round.
fn joined(guards: timely::communication::WorkerGuards<()>, round: &str) -> Result<()> {
    for (i, result) in guards.join().into_iter().enumerate() {
        if let Err(reason) = result {
            return Err(Error::Config(format!("{round}, worker {i}: {reason}")));
        }
    }
    Ok(())
}
