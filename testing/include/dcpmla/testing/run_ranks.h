// W ranks of a group run as threads of one process: the simulated ranks of the tests, the
// command-line tool and the multi-GPU benchmarks (rank r on GPU r).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace dcpmla::testing {

// Calls fn(rank) for every rank 0..world-1, each on its own thread, and returns once every rank
// has returned; then rethrows the exception of the lowest rank that threw, if any. A throwing
// rank does not stop the others, so an fn that enters collectives must let its peers know before
// it leaves them waiting (e.g. agree at a barrier after the set-up).
void run_ranks(int world, const std::function<void(int rank)>& fn);

// run_ranks that returns each rank's failure as text instead ("" for a rank that returned
// normally), so a test asserts per rank on its own thread.
std::vector<std::string> rank_failures(int world, const std::function<void(int rank)>& fn);

}  // namespace dcpmla::testing
