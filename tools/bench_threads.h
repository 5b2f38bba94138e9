// Internal to `tessel bench`: the thread pools of the libraries under tessel are fixed, so that a
// benchmark's ratios do not depend on the caller's environment. tessel runs one BLAS call per
// device thread, so OpenBLAS (and OpenMP, where a BLAS uses it) get one thread each. OpenBLAS
// reads OPENBLAS_NUM_THREADS once, when the library loads: with the variable unset, `tessel bench`
// sets it and executes itself again; a value the user set is kept and named on stderr.
#pragma once

namespace tessel::cli::bench {

// Call first thing in main() for a bench command; may not return (re-executes the program).
void pin_thread_environment(char** argv);

}  // namespace tessel::cli::bench
