#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in the `mi_option_e` enum of the pinned mimalloc (v3 `mimalloc.h`).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() {
    // capflow frees and reallocates large amounts of small objects between phases (the read
    // rows, per-image states, the inputs' state). Freed memory stays with the allocator for a
    // second instead of 10 ms, so it is not handed back to the OS and zeroed again on its next
    // use; the build also leaves transparent huge pages off (`no_thp`), which zero 2 MiB at each
    // first touch. See docs/decisions/memory-of-the-augment-phase.md.
    // SAFETY: sets an allocator option by its documented number; no allocation depends on it.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 1000) };
    std::process::exit(capflow::cli::main());
}
