//! The publisher's integration tests, in one binary: each file a module (a scenario against real
//! servers, or the checks of the binary's outputs and the code's architecture), grouped by
//! command (`run/`, `live/`, `sink/`, `dump/`), the shared pieces in [`support`]. One binary links the library and librdkafka once, not once per scenario.
//! `cargo test --test it run::chaos` runs one module's tests (`run::` all of `sluice run`'s).

mod support;

mod architecture;
mod archive;
mod dump;
mod live;
mod run;
mod seams;
mod sink;
mod verify;
