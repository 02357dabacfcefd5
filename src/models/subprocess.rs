//! Runs an external model as a child process speaking Arrow IPC streams over stdin/stdout.
//!
//! The child is started lazily on the first call and kept for the adapter's lifetime. Three
//! threads serve it: a writer owning stdin (so a child that stops reading cannot block the
//! caller past its timeout), a reader owning stdout that forwards each reply batch, and a drain
//! on stderr that keeps the last few KiB for error messages (so a chatty child never blocks on
//! a full stderr pipe). The calling thread only sends requests and waits on a channel with a
//! deadline. Every child that is stopped is also waited for, so none is left a zombie.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufReader, BufWriter, Read, Write};
use std::ops::Range;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde::{Deserialize, Serialize};

use super::protocol::{decode_reply, encode_request, ModelKind, ReplyValues};
use super::traits::{
    AmrToText, Embedder, ExternalQualityScorer, ImageText, ImageTextScorer, TextToAmr,
};
use crate::{Error, Result};

/// How much of the child's stderr is kept for error messages.
const STDERR_TAIL_BYTES: usize = 8 * 1024;
/// How long a child that closed its reply stream gets to report its exit status.
const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How long a child gets to exit by itself after capflow closes its request stream.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Every IPC message in a modern stream starts with this marker (pyarrow ≥ 0.15 writes it).
const CONTINUATION_MARKER: [u8; 4] = [0xff; 4];

/// How to run one external model, as written under `[models.<kind>]` in a dataflow spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterConfig {
    /// Program and arguments, e.g. `["python3", "examples/adapters/amrlib_generate.py"]`.
    pub command: Vec<String>,
    /// Extra environment variables for the child (the parent's environment is inherited).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory of the child; the parent's when absent.
    #[serde(default)]
    pub working_dir: Option<PathBuf>,
    /// Largest number of rows sent in one request batch.
    #[serde(default = "AdapterConfig::default_max_batch_size")]
    pub max_batch_size: usize,
    /// Seconds a child may take to answer one batch before it is killed.
    #[serde(default = "AdapterConfig::default_batch_timeout_secs")]
    pub batch_timeout_secs: f64,
    /// Extra seconds allowed for the first batch of each fresh child (model loading).
    #[serde(default = "AdapterConfig::default_startup_timeout_secs")]
    pub startup_timeout_secs: f64,
    /// How many times a crashed child is replaced over the adapter's lifetime.
    #[serde(default = "AdapterConfig::default_max_restarts")]
    pub max_restarts: u32,
}

impl AdapterConfig {
    fn default_max_batch_size() -> usize {
        64
    }
    fn default_batch_timeout_secs() -> f64 {
        120.0
    }
    fn default_startup_timeout_secs() -> f64 {
        300.0
    }
    fn default_max_restarts() -> u32 {
        3
    }

    /// A configuration with the defaults for everything but the command.
    pub fn new(command: impl IntoIterator<Item = impl Into<String>>) -> Self {
        AdapterConfig {
            command: command.into_iter().map(Into::into).collect(),
            env: BTreeMap::new(),
            working_dir: None,
            max_batch_size: Self::default_max_batch_size(),
            batch_timeout_secs: Self::default_batch_timeout_secs(),
            startup_timeout_secs: Self::default_startup_timeout_secs(),
            max_restarts: Self::default_max_restarts(),
        }
    }

    fn validate(&self, adapter: &str) -> Result<()> {
        let problem = if self.command.is_empty() || self.command[0].is_empty() {
            Some("`command` must name a program".to_string())
        } else if self.max_batch_size == 0 {
            Some("`max_batch_size` must be at least 1".to_string())
        } else if !(self.batch_timeout_secs.is_finite() && self.batch_timeout_secs > 0.0) {
            Some(format!(
                "`batch_timeout_secs` must be a positive number of seconds, not {}",
                self.batch_timeout_secs
            ))
        } else if !(self.startup_timeout_secs.is_finite() && self.startup_timeout_secs >= 0.0) {
            Some(format!(
                "`startup_timeout_secs` must be zero or a positive number of seconds, not {}",
                self.startup_timeout_secs
            ))
        } else {
            None
        };
        match problem {
            Some(reason) => Err(Error::Config(format!("models.{adapter}: {reason}"))),
            None => Ok(()),
        }
    }
}

/// An external model run as a child process; implements the trait of its [`ModelKind`].
///
/// Calling a trait of another kind is an [`Error::Adapter`] (the spec wired the model to the
/// wrong stage). Calls are serialised: one batch is in flight at a time.
pub struct SubprocessAdapter {
    name: String,
    kind: ModelKind,
    config: AdapterConfig,
    state: Mutex<AdapterState>,
}

#[derive(Default)]
struct AdapterState {
    child: Option<RunningChild>,
    next_request_id: i64,
    restarts: u32,
    vector_dimension: Option<usize>,
}

/// What the I/O threads report to the calling thread.
enum ChildEvent {
    Reply(RecordBatch),
    /// The reply stream is not valid Arrow IPC.
    Malformed(String),
    /// The reply stream ended (EOF or end-of-stream marker).
    Ended,
    /// Writing a request to stdin failed.
    WriteFailed(String),
}

struct RunningChild {
    process: Child,
    requests: Option<Sender<RecordBatch>>,
    events: Receiver<ChildEvent>,
    stderr_tail: Arc<Mutex<VecDeque<u8>>>,
    stderr_done: Receiver<()>,
    /// Bytes read from stdout so far, to tell a silent hang from a reply that never completes.
    stdout_bytes: Arc<AtomicU64>,
    answered: u64,
}

/// How one batch failed; decides whether it is retried on a fresh child.
enum BatchFailure {
    /// The child died or closed its streams: restart and retry once.
    Crashed(String),
    /// The child broke the protocol or hung: retrying would fail the same way.
    Fatal(String),
}

impl SubprocessAdapter {
    /// Checks the configuration; the child is started on the first call (or by [`Self::start`]).
    pub fn new(name: impl Into<String>, kind: ModelKind, config: AdapterConfig) -> Result<Self> {
        let name = name.into();
        config.validate(&name)?;
        Ok(SubprocessAdapter {
            name,
            kind,
            config,
            state: Mutex::new(AdapterState::default()),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn kind(&self) -> ModelKind {
        self.kind
    }

    pub fn config(&self) -> &AdapterConfig {
        &self.config
    }

    /// Starts the child now rather than on the first call, so a wrong command fails early.
    pub fn start(&self) -> Result<()> {
        let mut state = self.lock();
        if state.child.is_none() {
            let child = self
                .spawn()
                .map_err(|reason| self.error("startup", reason))?;
            state.child = Some(child);
        }
        Ok(())
    }

    /// Process id of the running child, if one is running.
    pub fn child_id(&self) -> Option<u32> {
        self.lock().child.as_ref().map(|c| c.process.id())
    }

    /// How many crashed children have been replaced so far.
    pub fn restarts(&self) -> u32 {
        self.lock().restarts
    }

    /// Closes the request stream, lets the child exit (killing it after a grace period) and
    /// waits for it. Called by `Drop`; a later call starts a fresh child.
    pub fn stop(&self) {
        if let Some(child) = self.lock().child.take() {
            child.shut_down();
        }
    }

    fn lock(&self) -> MutexGuard<'_, AdapterState> {
        // A panic while holding the lock leaves the state consistent enough to keep using:
        // at worst a child is replaced.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn error(&self, batch: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::Adapter {
            adapter: self.name.clone(),
            batch: batch.into(),
            reason: reason.into(),
        }
    }

    fn check_kind(&self, used_as: ModelKind) -> Result<()> {
        if self.kind == used_as {
            return Ok(());
        }
        Err(self.error(
            "the call (nothing was sent)",
            format!(
                "it is configured for kind `{}` but was used as kind `{used_as}`; check the \
                 spec's [models] section",
                self.kind
            ),
        ))
    }

    /// Sends `rows` items in batches of at most `max_batch_size` and concatenates the replies.
    /// `columns` renders the request columns for a range of items.
    fn call<'a>(
        &self,
        rows: usize,
        columns: impl Fn(Range<usize>) -> Result<Vec<Vec<&'a str>>, String>,
    ) -> Result<Vec<ReplyValues>> {
        let mut state = self.lock();
        let batch_size = self.config.max_batch_size;
        let batches = rows.div_ceil(batch_size);
        let mut replies = Vec::with_capacity(batches);
        for index in 0..batches {
            let items = index * batch_size..rows.min((index + 1) * batch_size);
            let first_id = state.next_request_id;
            let ids = first_id..first_id + items.len() as i64;
            let label = format!(
                "batch {index} of {batches} (items {}..{} of {rows}, request ids {}..{})",
                items.start, items.end, ids.start, ids.end
            );
            let request = columns(items.clone())
                .and_then(|cols| encode_request(self.kind, &self.name, first_id, cols))
                .map_err(|reason| self.error(&label, reason))?;
            state.next_request_id = ids.end;
            let reply = self.exchange_with_retry(&mut state, &request, ids, &label)?;
            replies.push(reply);
        }
        Ok(replies)
    }

    fn exchange_with_retry(
        &self,
        state: &mut AdapterState,
        request: &RecordBatch,
        ids: Range<i64>,
        label: &str,
    ) -> Result<ReplyValues> {
        let mut retried = false;
        loop {
            if state.child.is_none() {
                state.child = Some(self.spawn().map_err(|reason| self.error(label, reason))?);
            }
            let Some(child) = state.child.as_mut() else {
                continue;
            };
            let failure = match self.exchange(child, request, ids.clone()) {
                Ok(reply) => {
                    self.check_dimension(state, &reply)
                        .map_err(|reason| self.error(label, reason))?;
                    return Ok(reply);
                }
                Err(failure) => failure,
            };
            let Some(child) = state.child.take() else {
                continue;
            };
            let (status, stderr) = child.kill_and_wait();
            let context = format!("{}; {}", describe_status(status), describe_stderr(&stderr));
            match failure {
                BatchFailure::Crashed(reason)
                    if !retried && state.restarts < self.config.max_restarts =>
                {
                    tracing::warn!(
                        adapter = %self.name,
                        batch = label,
                        "external model crashed ({reason}; {context}); restarting it and retrying the batch"
                    );
                    state.restarts += 1;
                    retried = true;
                }
                BatchFailure::Crashed(reason) => {
                    let why = if retried {
                        "it crashed again on a fresh process after a restart"
                    } else {
                        "no restarts are left (max_restarts)"
                    };
                    return Err(self.error(label, format!("{reason}; {why}; {context}")));
                }
                BatchFailure::Fatal(reason) => {
                    return Err(self.error(label, format!("{reason}; {context}")));
                }
            }
        }
    }

    /// Sends one request batch to a running child and waits for its reply.
    fn exchange(
        &self,
        child: &mut RunningChild,
        request: &RecordBatch,
        ids: Range<i64>,
    ) -> Result<ReplyValues, BatchFailure> {
        let mut timeout = Duration::from_secs_f64(self.config.batch_timeout_secs);
        if child.answered == 0 {
            timeout += Duration::from_secs_f64(self.config.startup_timeout_secs);
        }
        let deadline = Instant::now() + timeout;
        let bytes_before = child.stdout_bytes.load(Ordering::Relaxed);
        let sent = child
            .requests
            .as_ref()
            .is_some_and(|requests| requests.send(request.clone()).is_ok());
        if !sent {
            return Err(BatchFailure::Crashed(
                "its request stream (stdin) is closed".to_string(),
            ));
        }
        let event = match child.events.recv_deadline(deadline) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => {
                let partial = child.stdout_bytes.load(Ordering::Relaxed) - bytes_before;
                let hint = if partial > 0 {
                    format!(
                        " ({partial} bytes arrived on stdout without forming a reply; text \
                         printed to stdout corrupts the reply stream, log to stderr)"
                    )
                } else {
                    String::new()
                };
                return Err(BatchFailure::Fatal(format!(
                    "no reply within {:.1} s (batch_timeout_secs{}){hint}; the process was killed",
                    timeout.as_secs_f64(),
                    if child.answered == 0 {
                        " + startup_timeout_secs"
                    } else {
                        ""
                    }
                )));
            }
            Err(RecvTimeoutError::Disconnected) => ChildEvent::Ended,
        };
        match event {
            ChildEvent::Reply(batch) => {
                child.answered += 1;
                decode_reply(self.kind, &batch, ids)
                    .map_err(|reason| BatchFailure::Fatal(format!("invalid reply: {reason}")))
            }
            ChildEvent::Ended => Err(BatchFailure::Crashed(
                "it closed its reply stream (stdout) before answering".to_string(),
            )),
            ChildEvent::WriteFailed(reason) => Err(BatchFailure::Crashed(format!(
                "writing the request to its stdin failed: {reason}"
            ))),
            ChildEvent::Malformed(reason) => {
                // A child that dies mid-reply leaves a truncated message: that is a crash. A
                // child still running (or exiting cleanly) wrote something that is not Arrow.
                match child.wait_for_exit(EXIT_GRACE) {
                    Some(status) if !status.success() => Err(BatchFailure::Crashed(format!(
                        "its reply was cut short ({reason})"
                    ))),
                    _ => Err(BatchFailure::Fatal(format!(
                        "its reply is not an Arrow IPC stream: {reason}"
                    ))),
                }
            }
        }
    }

    fn check_dimension(&self, state: &mut AdapterState, reply: &ReplyValues) -> Result<(), String> {
        let ReplyValues::Vectors(vectors) = reply else {
            return Ok(());
        };
        for (row, vector) in vectors.iter().enumerate() {
            match state.vector_dimension {
                None => state.vector_dimension = Some(vector.len()),
                Some(dim) if dim != vector.len() => {
                    return Err(format!(
                        "invalid reply: row {row} has a vector of dimension {}, but earlier \
                         vectors have dimension {dim}",
                        vector.len()
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    fn spawn(&self) -> Result<RunningChild, String> {
        let (program, args) = self
            .config
            .command
            .split_first()
            .ok_or_else(|| "`command` is empty".to_string())?;
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(&self.config.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = &self.config.working_dir {
            command.current_dir(dir);
        }
        let mut process = command.spawn().map_err(|e| {
            format!(
                "cannot start `{}`{}: {e}",
                self.config.command.join(" "),
                self.config
                    .working_dir
                    .as_ref()
                    .map(|d| format!(" in {}", d.display()))
                    .unwrap_or_default()
            )
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (
            process.stdin.take(),
            process.stdout.take(),
            process.stderr.take(),
        ) else {
            // Unreachable with piped stdio; kill rather than leak the child.
            let _ = process.kill();
            let _ = process.wait();
            return Err("the child's stdio pipes were not created".to_string());
        };
        let (events_tx, events) = crossbeam_channel::unbounded();
        let (requests, requests_rx) = crossbeam_channel::unbounded();
        let (stderr_done_tx, stderr_done) = crossbeam_channel::bounded(1);
        let stderr_tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL_BYTES)));
        let schema = Arc::new(self.kind.request_schema(&self.name));
        let stdout_bytes = Arc::new(AtomicU64::new(0));
        let stdout = CountingReader {
            inner: stdout,
            bytes: Arc::clone(&stdout_bytes),
        };

        let mut spawned = Ok(());
        for (role, result) in [
            (
                "stdin",
                spawn_thread(&self.name, "stdin", {
                    let events_tx = events_tx.clone();
                    move || write_requests(stdin, schema, requests_rx, events_tx)
                }),
            ),
            (
                "stdout",
                spawn_thread(&self.name, "stdout", move || {
                    read_replies(stdout, events_tx)
                }),
            ),
            (
                "stderr",
                spawn_thread(&self.name, "stderr", {
                    let tail = Arc::clone(&stderr_tail);
                    move || {
                        drain_stderr(stderr, &tail);
                        let _ = stderr_done_tx.send(());
                    }
                }),
            ),
        ] {
            if let (Ok(()), Err(e)) = (&spawned, result) {
                spawned = Err(format!("cannot start the {role} thread: {e}"));
            }
        }
        let child = RunningChild {
            process,
            requests: Some(requests),
            events,
            stderr_tail,
            stderr_done,
            stdout_bytes,
            answered: 0,
        };
        match spawned {
            Ok(()) => Ok(child),
            Err(reason) => {
                child.kill_and_wait();
                Err(reason)
            }
        }
    }

    fn texts(&self, kind: ModelKind, inputs: &[String]) -> Result<Vec<String>> {
        self.check_kind(kind)?;
        let replies = self.call(inputs.len(), |items| {
            Ok(vec![inputs[items].iter().map(String::as_str).collect()])
        })?;
        let mut out = Vec::with_capacity(inputs.len());
        for reply in replies {
            if let ReplyValues::Texts(texts) = reply {
                out.extend(texts);
            }
        }
        Ok(out)
    }

    fn scores(&self, replies: Vec<ReplyValues>, rows: usize) -> Vec<f64> {
        let mut out = Vec::with_capacity(rows);
        for reply in replies {
            if let ReplyValues::Scores(scores) = reply {
                out.extend(scores);
            }
        }
        out
    }
}

impl Drop for SubprocessAdapter {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for SubprocessAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubprocessAdapter")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("command", &self.config.command)
            .finish()
    }
}

impl TextToAmr for SubprocessAdapter {
    fn parse_captions(&self, captions: &[String]) -> Result<Vec<String>> {
        self.texts(ModelKind::TextToAmr, captions)
    }
}

impl AmrToText for SubprocessAdapter {
    fn generate_sentences(&self, graphs: &[String]) -> Result<Vec<String>> {
        self.texts(ModelKind::AmrToText, graphs)
    }
}

impl ExternalQualityScorer for SubprocessAdapter {
    fn score_sentences(&self, sentences: &[String]) -> Result<Vec<f64>> {
        self.check_kind(ModelKind::QualityScorer)?;
        let replies = self.call(sentences.len(), |items| {
            Ok(vec![sentences[items].iter().map(String::as_str).collect()])
        })?;
        Ok(self.scores(replies, sentences.len()))
    }
}

impl Embedder for SubprocessAdapter {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        self.check_kind(ModelKind::Embedder)?;
        let replies = self.call(texts.len(), |items| {
            Ok(vec![texts[items].iter().map(String::as_str).collect()])
        })?;
        let mut out = Vec::with_capacity(texts.len());
        for reply in replies {
            if let ReplyValues::Vectors(vectors) = reply {
                out.extend(vectors);
            }
        }
        Ok(out)
    }
}

impl ImageTextScorer for SubprocessAdapter {
    fn score_pairs(&self, pairs: &[ImageText]) -> Result<Vec<f64>> {
        self.check_kind(ModelKind::ImageTextScorer)?;
        let replies = self.call(pairs.len(), |items| {
            let offset = items.start;
            let pairs = &pairs[items];
            let mut images = Vec::with_capacity(pairs.len());
            for (i, pair) in pairs.iter().enumerate() {
                let path = pair.image.to_str().ok_or_else(|| {
                    format!(
                        "item {}: image path {} is not valid UTF-8",
                        offset + i,
                        pair.image.display()
                    )
                })?;
                images.push(path);
            }
            let texts = pairs.iter().map(|p| p.text.as_str()).collect();
            Ok(vec![images, texts])
        })?;
        Ok(self.scores(replies, pairs.len()))
    }
}

impl RunningChild {
    /// Polls for the child's exit for up to `grace`.
    fn wait_for_exit(&mut self, grace: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + grace;
        loop {
            match self.process.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
                _ => return None,
            }
        }
    }

    /// Kills the child, reaps it, and returns its exit status and the tail of its stderr.
    fn kill_and_wait(mut self) -> (Option<ExitStatus>, String) {
        self.requests = None;
        let status = match self.process.try_wait() {
            Ok(Some(status)) => Some(status),
            _ => {
                // Killing an already-exited child fails harmlessly; wait() reaps it either way.
                let _ = self.process.kill();
                self.process.wait().ok()
            }
        };
        (status, self.finish_stderr())
    }

    /// Closes stdin (the writer ends the stream), gives the child time to exit, then kills it.
    fn shut_down(mut self) {
        self.requests = None;
        if self.wait_for_exit(SHUTDOWN_GRACE).is_none() {
            let _ = self.process.kill();
            let _ = self.process.wait();
        }
        let _ = self.finish_stderr();
    }

    /// Waits briefly for the stderr drain to see EOF, then returns the tail. A grandchild that
    /// inherited the pipe could keep it open forever, hence the bound.
    fn finish_stderr(&self) -> String {
        let _ = self.stderr_done.recv_timeout(Duration::from_secs(2));
        let tail = self.stderr_tail.lock().unwrap_or_else(|p| p.into_inner());
        let (a, b) = tail.as_slices();
        let mut bytes = a.to_vec();
        bytes.extend_from_slice(b);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

fn spawn_thread(
    adapter: &str,
    role: &str,
    body: impl FnOnce() + Send + 'static,
) -> std::io::Result<()> {
    thread::Builder::new()
        .name(format!("capflow-model-{adapter}-{role}"))
        .spawn(body)
        .map(|_| ())
}

/// Writes the request stream: schema first, then one flushed batch per request; finishing the
/// stream (end-of-stream marker, then EOF) when the adapter drops its sender.
fn write_requests(
    stdin: ChildStdin,
    schema: SchemaRef,
    requests: Receiver<RecordBatch>,
    events: Sender<ChildEvent>,
) {
    let result = (|| {
        let mut writer = StreamWriter::try_new(BufWriter::new(stdin), &schema)?;
        writer.flush()?;
        for batch in requests {
            writer.write(&batch)?;
            writer.flush()?;
        }
        writer.finish()?;
        writer.get_mut().flush()?;
        Ok::<(), arrow::error::ArrowError>(())
    })();
    if let Err(e) = result {
        let _ = events.send(ChildEvent::WriteFailed(e.to_string()));
    }
}

/// Reads the reply stream and forwards each batch; checks the first bytes so that a child
/// printing text to stdout gets a clear error instead of a parser waiting for a huge message.
fn read_replies(stdout: CountingReader<ChildStdout>, events: Sender<ChildEvent>) {
    let mut stdout = BufReader::new(stdout);
    let mut head = [0u8; 4];
    let mut filled = 0;
    while filled < head.len() {
        match stdout.read(&mut head[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                let _ = events.send(ChildEvent::Malformed(format!("reading stdout: {e}")));
                return;
            }
        }
    }
    if filled == 0 {
        let _ = events.send(ChildEvent::Ended);
        return;
    }
    if head[..filled] != CONTINUATION_MARKER[..filled] || filled < head.len() {
        let mut preview = head[..filled].to_vec();
        let mut more = [0u8; 60];
        if filled == head.len() {
            if let Ok(n) = stdout.read(&mut more) {
                preview.extend_from_slice(&more[..n]);
            }
        }
        let _ = events.send(ChildEvent::Malformed(format!(
            "stdout starts with {:?} instead of an Arrow IPC stream (an adapter must write only \
             Arrow IPC to stdout and log to stderr)",
            String::from_utf8_lossy(&preview)
        )));
        return;
    }
    let reader = match StreamReader::try_new(std::io::Cursor::new(head).chain(stdout), None) {
        Ok(reader) => reader,
        Err(e) => {
            let _ = events.send(ChildEvent::Malformed(e.to_string()));
            return;
        }
    };
    for batch in reader {
        let event = match batch {
            Ok(batch) => ChildEvent::Reply(batch),
            Err(e) => ChildEvent::Malformed(e.to_string()),
        };
        let stop = matches!(event, ChildEvent::Malformed(_));
        if events.send(event).is_err() || stop {
            return;
        }
    }
    let _ = events.send(ChildEvent::Ended);
}

/// Counts the bytes that pass through a reader.
struct CountingReader<R> {
    inner: R,
    bytes: Arc<AtomicU64>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Reads stderr to EOF, keeping only the last [`STDERR_TAIL_BYTES`].
fn drain_stderr(mut stderr: ChildStderr, tail: &Mutex<VecDeque<u8>>) {
    let mut buf = [0u8; 4096];
    loop {
        match stderr.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
                tail.extend(&buf[..n]);
                let excess = tail.len().saturating_sub(STDERR_TAIL_BYTES);
                tail.drain(..excess);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn describe_status(status: Option<ExitStatus>) -> String {
    match status {
        Some(status) => format!("process {status}"),
        None => "exit status unknown".to_string(),
    }
}

fn describe_stderr(stderr: &str) -> String {
    let stderr = stderr.trim_end();
    if stderr.is_empty() {
        "stderr was empty".to_string()
    } else {
        format!("stderr (last lines):\n{stderr}")
    }
}
