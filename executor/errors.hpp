// Typed errors of the executor, each carrying its context (rank, instruction, file). The
// library throws them; only the command line maps them to exit codes (cli/run.cpp). Not for
// bad config files, which throw spec::SpecError where they are loaded.
#pragma once

#include <stdexcept>
#include <string>

namespace stagecraft::executor {

// A plan or Program the executor cannot run, or a failure while running one ("rank 3: ...").
class ExecutorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A loss or gradient norm that is NaN or infinite: the training diverged (or its inputs were bad).
// The run stops at once, naming the step, micro-batch and stage, before the optimizer writes it
// into the parameters.
class NonFiniteError : public ExecutorError {
 public:
  using ExecutorError::ExecutorError;
};

// The test-only fault switch (STAGECRAFT_FAULT_RANK / STAGECRAFT_FAULT_STEP) fired.
class InjectedFault : public ExecutorError {
 public:
  using ExecutorError::ExecutorError;
};

// A checkpoint that is missing, corrupt or does not match the run resuming from it; raised
// on every rank, before any training step, with the reasons of all ranks.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An output of a finished run (its trace) that cannot be written: a full disk, a folder gone.
// Raised on the rank that writes it, after every collective of the run.
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A communicator used against its contract: a peer outside the group, a request that is not
// pending, counts that do not match the group. A failing MPI call throws mpi::MpiError
// (MPI_CHECK, mpi/error.hpp), naming the call, file and line.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace stagecraft::executor
