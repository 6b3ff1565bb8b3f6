mod benchmark;
mod soak;
