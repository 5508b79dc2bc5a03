// Checks on a Program, run on every lowering in debug builds and in tests:
//  * dependencies point to earlier instructions of the same list (so each rank's graph is acyclic);
//  * on every rank each (chunk, micro-batch) is run forward exactly once before its backward
//    (or BackwardInput, then BackwardWeight);
//  * every Send has a matching Recv on the peer (same kind, micro-batch, chunks and bytes), the
//    collectives of every group are issued in the same order with the same operands by all its
//    members, and the per-rank orders cannot deadlock: the whole step is executed abstractly
//    (lanes in order, dependencies, sends buffered, receives waiting for their send, collectives
//    waiting for every member) and must run to completion.
// Ranks that share one instruction list are checked once per distinct list where that is exact.
#pragma once

#include <stdexcept>
#include <string>

#include "core/program/program.hpp"

namespace stagecraft::program {

class ProgramError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws ProgramError naming the rank and the instruction at fault.
void check(const Program& prog);

// Pipeline messages in FIFO order: for every (sender, receiver, kind) — activations or gradients —
// the sender's pp-send lane sends its messages (micro-batch, chunks) in the order the receiver's
// pp-recv lane receives them. A transport without tags (NCCL point-to-point: a receive matches the
// peer's next send on the communicator) needs exactly this, with one communicator per (sender,
// receiver, kind); MPI's tags do not. Throws ProgramError naming both instructions at the first
// difference. check() runs it too.
void check_p2p_order(const Program& prog);

}  // namespace stagecraft::program
