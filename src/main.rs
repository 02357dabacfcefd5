fn main() {
    std::process::exit(capflow::cli::main());
}
