//! The live progress display of a run on a terminal: which system, workload and phase, requests
//! sent, done and failed against the bound, the current throughput, an ETA, and which run of
//! how many when a script makes several.
//!
//! It is drawn with `indicatif` only when stderr is a terminal (`ProgressDrawTarget::stderr()`
//! turns itself into a hidden target otherwise, and on `TERM=dumb`), because scripts redirect
//! stderr to logs that must read the same as before: there the runners keep writing their
//! once-a-second lines, see [`Progress::lines`].
//!
//! The bench measures latency, so nothing here touches the request path but relaxed atomic
//! increments ([`Live`]); the display is rendered and drawn on a thread of its own, a few times
//! a second, from a snapshot of those counters ([`head`], [`status`] and [`render`] are pure so
//! that they can be tested).

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often the line is redrawn: often enough to look live, rarely enough to cost nothing.
const TICK: Duration = Duration::from_millis(250);
/// The span the current throughput is measured over: long enough to smooth the bursts of
/// completions a closed loop makes, short enough to follow a change of pace.
const RATE_SPAN: Duration = Duration::from_secs(3);
/// Less history than this gives a rate made of one or two completions: none is shown.
const RATE_MIN_SPAN: Duration = Duration::from_millis(500);

/// "Run I of N", given by the caller (a script looping over seeds, points or systems); the
/// binary makes one run per invocation and cannot know it otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunIndex {
    pub index: u32,
    pub of: u32,
}

impl FromStr for RunIndex {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("{s:?} is not I/N (e.g. 2/5, 1 ≤ I ≤ N)");
        let (i, n) = s.trim().split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let of: u32 = n.trim().parse().map_err(|_| bad())?;
        if index == 0 || index > of {
            return Err(bad());
        }
        Ok(Self { index, of })
    }
}

impl fmt::Display for RunIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.of)
    }
}

/// What is being run, fixed for the whole run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Info {
    /// The system measured: the label, else the URL.
    pub system: String,
    /// The workload and how its load is offered, e.g. `shared-prefix closed c32`.
    pub workload: String,
    pub run: Option<RunIndex>,
    /// Requests to send, when the run is bounded by a count.
    pub requests: Option<u64>,
    /// How long load is offered, when the run is bounded by time.
    pub duration: Option<Duration>,
    pub warmup: Warmup,
}

/// What the run counts as warm-up, for the phase shown.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Warmup {
    #[default]
    None,
    /// The first W requests to complete (`run --warmup`).
    Requests(u64),
    /// The first stretch of time (`fairness --warmup`).
    Time(Duration),
}

/// The counters the load generator bumps; everything else is derived from them on the
/// drawing thread.
#[derive(Debug, Default)]
pub struct Live {
    sent: AtomicU64,
    done: AtomicU64,
    failed: AtomicU64,
    sending_over: AtomicBool,
    /// Figures the runners already compute once a second (last second's TTFT, per-tenant
    /// counts), appended to the line; a lock taken once a second, never per request.
    extra: Mutex<String>,
}

impl Live {
    pub fn sent(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    pub fn finished(&self, failed: bool) {
        self.done.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sending has stopped; what is in flight is being awaited.
    pub fn stop_sending(&self) {
        self.sending_over.store(true, Ordering::Relaxed);
    }

    pub fn sent_count(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    pub fn set_extra(&self, extra: String) {
        *self.extra.lock().unwrap_or_else(|e| e.into_inner()) = extra;
    }

    fn extra(&self) -> String {
        self.extra.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn snapshot(&self, elapsed: Duration) -> Snapshot {
        Snapshot {
            elapsed,
            sent: self.sent.load(Ordering::Relaxed),
            done: self.done.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            sending_over: self.sending_over.load(Ordering::Relaxed),
            finished: false,
        }
    }
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Snapshot {
    /// Since the run started.
    pub elapsed: Duration,
    pub sent: u64,
    /// Completed, failed ones included.
    pub done: u64,
    pub failed: u64,
    pub sending_over: bool,
    /// Every request is accounted for: the final line.
    pub finished: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    WarmUp,
    Running,
    Draining,
    Done,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::WarmUp => "warm-up",
            Phase::Running => "running",
            Phase::Draining => "draining",
            Phase::Done => "done",
        })
    }
}

pub fn phase(info: &Info, s: &Snapshot) -> Phase {
    if s.finished {
        return Phase::Done;
    }
    if s.sending_over || info.duration.is_some_and(|d| s.elapsed >= d) {
        return Phase::Draining;
    }
    match info.warmup {
        Warmup::Requests(w) if s.done < w => Phase::WarmUp,
        Warmup::Time(w) if s.elapsed < w => Phase::WarmUp,
        _ => Phase::Running,
    }
}

/// Time left: to the duration bound, or the requests left at the current rate, whichever comes
/// first. Once time is up, only a count-bounded run whose every request was sent has a
/// foreseeable end (what is in flight at the current rate); a drain bounded by timeouts has none.
pub fn eta(info: &Info, s: &Snapshot, rate: Option<f64>) -> Option<Duration> {
    let by_count = |n: u64| {
        let r = rate.filter(|r| *r > 0.0)?;
        Some(Duration::from_secs_f64(n.saturating_sub(s.done) as f64 / r))
    };
    match phase(info, s) {
        Phase::Done => None,
        Phase::Draining => info.requests.filter(|n| s.sent >= *n).and_then(by_count),
        Phase::WarmUp | Phase::Running => {
            let by_time = info.duration.map(|d| d.saturating_sub(s.elapsed));
            match (by_time, info.requests.and_then(by_count)) {
                (Some(t), Some(c)) => Some(t.min(c)),
                (t, c) => t.or(c),
            }
        }
    }
}

/// `7s`, `1m05s`, `2h03m`.
pub fn short_duration(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    }
}

/// What is run: `prefix · shared-prefix closed c32 · run 2/5`. Fixed for the run, so the live
/// display shows it once, on a line above [`status`], where a narrow terminal cannot push the
/// counts out of sight.
pub fn head(info: &Info) -> String {
    let mut parts: Vec<String> = Vec::with_capacity(3);
    for name in [&info.system, &info.workload] {
        if !name.is_empty() {
            parts.push(name.clone());
        }
    }
    if let Some(run) = info.run {
        parts.push(format!("run {run}"));
    }
    parts.join(" · ")
}

/// Where the run is: `running · 3s · 130 sent · 120/400 done · 3 failed · 41.2 req/s · ETA 7s`,
/// then `extra`.
pub fn status(info: &Info, s: &Snapshot, rate: Option<f64>, extra: &str) -> String {
    let mut parts: Vec<String> = Vec::with_capacity(9);
    parts.push(phase(info, s).to_string());
    parts.push(match info.duration {
        Some(d) if !s.finished => {
            format!("{}/{}", short_duration(s.elapsed), short_duration(d))
        }
        _ => short_duration(s.elapsed),
    });
    parts.push(format!("{} sent", s.sent));
    parts.push(match info.requests {
        Some(n) => format!("{}/{n} done", s.done),
        None => format!("{} done", s.done),
    });
    parts.push(format!("{} failed", s.failed));
    if let Some(r) = rate {
        parts.push(format!("{r:.1} req/s"));
    }
    if let Some(left) = eta(info, s, rate) {
        parts.push(format!("ETA {}", short_duration(left)));
    }
    if !extra.is_empty() {
        parts.push(extra.to_owned());
    }
    parts.join(" · ")
}

/// [`head`] and [`status`] on one line.
pub fn render(info: &Info, s: &Snapshot, rate: Option<f64>, extra: &str) -> String {
    let head = head(info);
    let status = status(info, s, rate, extra);
    if head.is_empty() {
        status
    } else {
        format!("{head} · {status}")
    }
}

/// Completions per second over the last [`RATE_SPAN`] of samples.
#[derive(Debug, Clone)]
pub struct RateWindow {
    span: Duration,
    samples: VecDeque<(Duration, u64)>,
}

impl RateWindow {
    pub fn new(span: Duration) -> Self {
        Self {
            span,
            samples: VecDeque::new(),
        }
    }

    /// Records `done` at `at` (since the start) and returns the rate since the oldest sample
    /// kept, or None while that is less than half a second ago.
    pub fn observe(&mut self, at: Duration, done: u64) -> Option<f64> {
        self.samples.push_back((at, done));
        // Keep the newest sample that is at least `span` old as the window's start, so the
        // window spans the whole span once there is that much history.
        while self.samples.len() > 2 && at.saturating_sub(self.samples[1].0) >= self.span {
            self.samples.pop_front();
        }
        let (t0, d0) = self.samples[0];
        let dt = at.saturating_sub(t0);
        (dt >= RATE_MIN_SPAN).then(|| done.saturating_sub(d0) as f64 / dt.as_secs_f64())
    }
}

/// The drawing thread and how to stop it.
struct Ticker {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

/// A run's progress reporting: off, a live line on a terminal, or (stderr not a terminal) the
/// runners' plain once-a-second lines.
pub struct Progress {
    info: Arc<Info>,
    live: Arc<Live>,
    enabled: bool,
    /// Some only when it draws somewhere.
    bar: Option<ProgressBar>,
    ticker: Option<Ticker>,
    start: Option<Instant>,
}

impl Progress {
    /// No progress at all (`--quiet`, `--no-progress`, tests).
    pub fn off() -> Self {
        Self::new(Info::default(), false, ProgressDrawTarget::hidden())
    }

    /// The live line on stderr when it is a terminal, the plain lines otherwise.
    pub fn stderr(info: Info) -> Self {
        Self::new(info, true, ProgressDrawTarget::stderr())
    }

    pub fn new(info: Info, enabled: bool, target: ProgressDrawTarget) -> Self {
        let bar = (enabled && !target.is_hidden()).then(|| {
            let bar = ProgressBar::with_draw_target(None, target);
            // No spinner: it would need a draw of its own each tick, and the elapsed time in
            // the status already shows the run is alive. `wide_msg` cuts the status at the
            // terminal's width instead of wrapping it.
            let head = head(&info);
            let template = if head.is_empty() {
                "{wide_msg}"
            } else {
                "{prefix}\n{wide_msg}"
            };
            bar.set_style(ProgressStyle::with_template(template).expect("a valid template"));
            bar.set_prefix(head);
            bar
        });
        Self {
            info: Arc::new(info),
            live: Arc::new(Live::default()),
            enabled,
            bar,
            ticker: None,
            start: None,
        }
    }

    /// The live line is drawn (stderr is a terminal and progress is on).
    pub fn drawn(&self) -> bool {
        self.bar.is_some()
    }

    /// Progress is on but there is no terminal to draw on: the runners print their plain
    /// once-a-second lines, as they always have, so logs of scripts do not change.
    pub fn lines(&self) -> bool {
        self.enabled && self.bar.is_none()
    }

    pub fn live(&self) -> Arc<Live> {
        self.live.clone()
    }

    /// The run starts now (`start` is the runner's own clock, so elapsed times agree).
    pub fn begin(&mut self, start: Instant) {
        self.start = Some(start);
        let Some(bar) = self.bar.clone() else { return };
        if self.ticker.is_some() {
            return;
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let (info, live) = (self.info.clone(), self.live.clone());
        let thread = std::thread::Builder::new()
            .name("bench-progress".into())
            .spawn(move || {
                let mut rate = RateWindow::new(RATE_SPAN);
                loop {
                    let s = live.snapshot(start.elapsed());
                    let r = rate.observe(s.elapsed, s.done);
                    bar.set_message(status(&info, &s, r, &live.extra()));
                    match stopped.recv_timeout(TICK) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        _ => break,
                    }
                }
            });
        // Without a thread there is no live line, but the run itself must go on.
        if let Ok(thread) = thread {
            self.ticker = Some(Ticker { stop, thread });
        }
    }

    /// Every request is accounted for: the last line, with the whole run's average rate, is
    /// left on the terminal above the run's summary.
    pub fn finish(&mut self) {
        if let Some(t) = self.ticker.take() {
            drop(t.stop);
            let _ = t.thread.join();
        }
        let Some(bar) = self.bar.take() else { return };
        let elapsed = self.start.map_or(Duration::ZERO, |s| s.elapsed());
        let mut s = self.live.snapshot(elapsed);
        s.finished = true;
        let secs = elapsed.as_secs_f64();
        let rate = (secs > 0.0).then(|| s.done as f64 / secs);
        bar.finish_with_message(status(&self.info, &s, rate, ""));
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> Info {
        Info {
            system: "prefix".into(),
            workload: "shared-prefix closed c32".into(),
            run: Some(RunIndex { index: 2, of: 5 }),
            requests: Some(400),
            duration: None,
            warmup: Warmup::None,
        }
    }

    fn snap(elapsed_s: u64, sent: u64, done: u64, failed: u64) -> Snapshot {
        Snapshot {
            elapsed: Duration::from_secs(elapsed_s),
            sent,
            done,
            failed,
            sending_over: false,
            finished: false,
        }
    }

    #[test]
    fn renders_a_count_bounded_run() {
        assert_eq!(
            render(&info(), &snap(3, 130, 120, 3), Some(41.2), ""),
            "prefix · shared-prefix closed c32 · run 2/5 · running · 3s · 130 sent · 120/400 done · 3 failed · 41.2 req/s · ETA 7s"
        );
        // Before any rate is known there is no ETA to give.
        assert_eq!(
            render(&info(), &snap(0, 32, 0, 0), None, "TTFT p50 - ms"),
            "prefix · shared-prefix closed c32 · run 2/5 · running · 0s · 32 sent · 0/400 done · 0 failed · TTFT p50 - ms"
        );
    }

    #[test]
    fn renders_a_time_bounded_run_and_its_drain() {
        let info = Info {
            run: None,
            requests: None,
            duration: Some(Duration::from_secs(30)),
            ..info()
        };
        assert_eq!(
            render(&info, &snap(12, 500, 480, 0), Some(40.0), ""),
            "prefix · shared-prefix closed c32 · running · 12s/30s · 500 sent · 480 done · 0 failed · 40.0 req/s · ETA 18s"
        );
        // Time is up: the drain is bounded by timeouts, not foreseeable.
        let mut s = snap(30, 1200, 1190, 1);
        s.sending_over = true;
        assert_eq!(phase(&info, &s), Phase::Draining);
        assert_eq!(eta(&info, &s, Some(40.0)), None);
        // Both bounds: whichever ends first.
        let both = Info {
            requests: Some(1000),
            ..info.clone()
        };
        assert_eq!(
            eta(&both, &snap(10, 420, 400, 0), Some(40.0)),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            eta(&both, &snap(25, 420, 400, 0), Some(40.0)),
            Some(Duration::from_secs(5))
        );
    }

    #[test]
    fn phases_follow_warmup_sending_and_the_end() {
        let i = Info {
            warmup: Warmup::Requests(50),
            ..info()
        };
        assert_eq!(phase(&i, &snap(1, 80, 49, 0)), Phase::WarmUp);
        assert_eq!(phase(&i, &snap(1, 80, 50, 0)), Phase::Running);
        // Every request sent, the last ones in flight: the count still gives an ETA.
        let mut s = snap(9, 400, 380, 0);
        s.sending_over = true;
        assert_eq!(phase(&i, &s), Phase::Draining);
        assert_eq!(eta(&i, &s, Some(40.0)), Some(Duration::from_millis(500)));
        s.finished = true;
        assert_eq!(phase(&i, &s), Phase::Done);
        assert_eq!(eta(&i, &s, Some(40.0)), None);
        let timed = Info {
            warmup: Warmup::Time(Duration::from_secs(5)),
            duration: Some(Duration::from_secs(20)),
            requests: None,
            ..info()
        };
        assert_eq!(phase(&timed, &snap(4, 1, 0, 0)), Phase::WarmUp);
        assert_eq!(phase(&timed, &snap(5, 1, 0, 0)), Phase::Running);
        assert_eq!(phase(&timed, &snap(20, 1, 0, 0)), Phase::Draining);
    }

    #[test]
    fn run_index_parses_and_refuses_nonsense() {
        assert_eq!("2/5".parse(), Ok(RunIndex { index: 2, of: 5 }));
        for bad in ["0/5", "6/5", "2", "a/b", "2/"] {
            assert!(bad.parse::<RunIndex>().is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_read_short() {
        assert_eq!(short_duration(Duration::from_millis(6_600)), "7s");
        assert_eq!(short_duration(Duration::from_secs(65)), "1m05s");
        assert_eq!(short_duration(Duration::from_secs(7_380)), "2h03m");
    }

    #[test]
    fn the_rate_follows_the_last_seconds() {
        let mut w = RateWindow::new(Duration::from_secs(3));
        assert_eq!(w.observe(Duration::ZERO, 0), None);
        // A quarter of a second says too little to show a rate.
        assert_eq!(w.observe(Duration::from_millis(250), 10), None);
        let mut last = None;
        // 40 completions a second for 5 s, sampled every 250 ms.
        for k in 2..=20u64 {
            last = w.observe(Duration::from_millis(250 * k), 10 * k);
        }
        assert_eq!(last, Some(40.0));
        // Then it halves: after a whole span only the new pace is left.
        let mut done = 200;
        for k in 21..=32u64 {
            done += 5;
            last = w.observe(Duration::from_millis(250 * k), done);
        }
        assert_eq!(last, Some(20.0));
    }

    #[test]
    fn counters_count_what_the_runner_reports() {
        let live = Live::default();
        for _ in 0..7 {
            live.sent();
        }
        live.finished(false);
        live.finished(true);
        live.finished(false);
        live.stop_sending();
        let s = live.snapshot(Duration::from_secs(2));
        assert_eq!((s.sent, s.done, s.failed, s.sending_over), (7, 3, 1, true));
    }

    /// A terminal that keeps what is drawn on it.
    #[derive(Debug, Clone, Default)]
    struct Screen(Arc<Mutex<String>>);

    impl indicatif::TermLike for Screen {
        fn width(&self) -> u16 {
            250
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            let mut screen = self.0.lock().unwrap();
            screen.push_str(s);
            screen.push('\n');
            Ok(())
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str(s);
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_terminal_gets_the_line_and_its_final_counts() {
        let screen = Screen::default();
        let mut p = Progress::new(
            Info {
                requests: Some(10),
                ..info()
            },
            true,
            ProgressDrawTarget::term_like(Box::new(screen.clone())),
        );
        assert!(p.drawn() && !p.lines());
        p.begin(Instant::now());
        let live = p.live();
        for _ in 0..10 {
            live.sent();
        }
        for k in 0..10 {
            live.finished(k % 4 == 0);
        }
        live.stop_sending();
        p.finish();
        let drawn = screen.0.lock().unwrap().clone();
        // indicatif pads each line to the width rather than ending it: the last draw is what
        // follows the last head, and it holds the final counts.
        let head = "prefix · shared-prefix closed c32 · run 2/5";
        let last = drawn[drawn.rfind(head).expect(&drawn) + head.len()..].trim();
        assert!(
            last.starts_with("done · ") && last.contains("10 sent · 10/10 done · 3 failed"),
            "{drawn}"
        );
    }

    /// The check `ProgressDrawTarget::stderr()` makes, on a file instead of stderr: not a
    /// terminal, so nothing is drawn and the runners fall back to their plain lines.
    #[cfg(unix)]
    #[test]
    fn nothing_is_drawn_where_there_is_no_terminal() {
        use std::io::Read;
        let path = std::env::temp_dir().join(format!("bench-progress-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let input = std::fs::File::open("/dev/null").unwrap();
        let term = console::Term::read_write_pair(input, file);
        let mut p = Progress::new(info(), true, ProgressDrawTarget::term(term, 20));
        assert!(!p.drawn() && p.lines());
        p.begin(Instant::now());
        let live = p.live();
        live.sent();
        live.finished(false);
        std::thread::sleep(2 * TICK);
        p.finish();
        let mut written = String::new();
        std::fs::File::open(&path)
            .unwrap()
            .read_to_string(&mut written)
            .unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(written, "");

        let off = Progress::off();
        assert!(!off.drawn() && !off.lines());
    }
}
