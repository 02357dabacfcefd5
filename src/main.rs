#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in the `mi_option_e` enum of the pinned mimalloc (v3 `mimalloc.h`).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() {
    // capflow frees and reallocates many small objects as each bucket part goes through the
    // stages. Freed memory stays with the allocator for 100 ms (mimalloc's default is 10 ms):
    // long enough that the next part reuses it without the OS zeroing it again, short enough
    // that resident memory follows what the run holds. The build also leaves transparent huge
    // pages off (`no_thp`), which zero 2 MiB at each first touch. `MIMALLOC_PURGE_DELAY` (in
    // ms), when set, overrides the delay. See docs/decisions/memory-of-the-augment-phase.md.
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets an allocator option by its documented number; no allocation depends on it.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 100) };
    }
    std::process::exit(capflow::cli::main());
}
