// The in-process communicator: collectives over W rank threads, repeated, in several dtypes.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "dcpmla/comm.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/error.h"
#include "dcpmla/numeric.h"
#include "dcpmla/testing/run_ranks.h"

namespace dcpmla {
namespace {

// Runs body(comm) on W rank threads, one communicator each (moving data through a CPU backend
// of its own, or with plain host copies); expects every rank to succeed.
void on_communicators(int W, bool through_backend, const std::function<void(Communicator&)>& body) {
  InProcessGroup group(W);
  ASSERT_EQ(group.world(), W);
  const auto errors = testing::rank_failures(W, [&](int r) {
    auto backend = through_backend ? make_cpu_backend(1) : nullptr;
    InProcessCommunicator comm(group, r, backend.get());
    body(comm);
  });
  for (int r = 0; r < W; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// A value that identifies (round, source rank, destination chunk, element).
float tag(int round, int src, int chunk, std::size_t i) {
  return float(round * 100000 + src * 10000 + chunk * 1000) + float(i % 1000);
}

// (world size, data moved through a backend)
class Collectives : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(Collectives, AllGatherF32) {
  const auto [W, through_backend] = GetParam();
  on_communicators(W, through_backend, [W](Communicator& c) {
    EXPECT_EQ(c.world(), W);
    for (int round = 0; round < 5; ++round) {
      const std::size_t count = 1 + std::size_t(round) * 37;
      std::vector<float> send(count), recv(W * count, -1.0f);
      for (std::size_t i = 0; i < count; ++i) send[i] = tag(round, c.rank(), 0, i);
      c.all_gather(send.data(), recv.data(), count, DType::f32, nullptr);
      // the send buffer is reusable right away: scribble on it before the next round
      std::fill(send.begin(), send.end(), -7.0f);
      for (int r = 0; r < W; ++r) {
        for (std::size_t i = 0; i < count; ++i) {
          ASSERT_EQ(recv[r * count + i], tag(round, r, 0, i)) << "rank " << c.rank();
        }
      }
    }
  });
}

TEST_P(Collectives, AllGatherOtherDtypes) {
  const auto [W, through_backend] = GetParam();
  on_communicators(W, through_backend, [W](Communicator& c) {
    const std::size_t count = 11;
    std::vector<std::uint16_t> s16(count), r16(W * count);
    std::vector<std::int64_t> s64(count), r64(W * count);
    std::vector<std::uint8_t> s8(count), r8(W * count);
    for (std::size_t i = 0; i < count; ++i) {
      s16[i] = float_to_bf16(float(c.rank() * 16 + int(i)));
      s64[i] = (std::int64_t(c.rank()) << 40) + std::int64_t(i);
      s8[i] = std::uint8_t(c.rank() * 16 + int(i));
    }
    c.all_gather(s16.data(), r16.data(), count, DType::bf16, nullptr);
    c.all_gather(s64.data(), r64.data(), count, DType::i64, nullptr);
    c.all_gather(s8.data(), r8.data(), count, DType::fp8_e4m3, nullptr);
    for (int r = 0; r < W; ++r) {
      for (std::size_t i = 0; i < count; ++i) {
        ASSERT_EQ(bf16_to_float(r16[r * count + i]), float(r * 16 + int(i)));
        ASSERT_EQ(r64[r * count + i], (std::int64_t(r) << 40) + std::int64_t(i));
        ASSERT_EQ(r8[r * count + i], std::uint8_t(r * 16 + int(i)));
      }
    }
  });
}

TEST_P(Collectives, ReduceScatterSum) {
  const auto [W, through_backend] = GetParam();
  on_communicators(W, through_backend, [W](Communicator& c) {
    for (int round = 0; round < 5; ++round) {
      const std::size_t count = 3 + std::size_t(round) * 50;
      // send[chunk][i] = (rank + 1) * (chunk * count + i + round): small integers, exact sums
      std::vector<float> send(W * count), recv(count, -1.0f);
      for (int chunk = 0; chunk < W; ++chunk) {
        for (std::size_t i = 0; i < count; ++i) {
          send[chunk * count + i] = float((c.rank() + 1) * (chunk * int(count) + int(i) + round));
        }
      }
      c.reduce_scatter_sum(send.data(), recv.data(), count, nullptr);
      std::fill(send.begin(), send.end(), -1.0f);
      const int ranks_sum = W * (W + 1) / 2;
      for (std::size_t i = 0; i < count; ++i) {
        ASSERT_EQ(recv[i], float(ranks_sum * (c.rank() * int(count) + int(i) + round)))
            << "rank " << c.rank() << " i " << i;
      }
    }
  });
}

TEST_P(Collectives, AllToAll) {
  const auto [W, through_backend] = GetParam();
  on_communicators(W, through_backend, [W](Communicator& c) {
    for (int round = 0; round < 5; ++round) {
      const std::size_t count = 1 + std::size_t(round) * 29;
      std::vector<float> send(W * count), recv(W * count, -1.0f);
      for (int dest = 0; dest < W; ++dest) {
        for (std::size_t i = 0; i < count; ++i)
          send[dest * count + i] = tag(round, c.rank(), dest, i);
      }
      c.all_to_all(send.data(), recv.data(), count, DType::f32, nullptr);
      std::fill(send.begin(), send.end(), -3.0f);
      for (int src = 0; src < W; ++src) {
        for (std::size_t i = 0; i < count; ++i) {
          ASSERT_EQ(recv[src * count + i], tag(round, src, c.rank(), i))
              << "rank " << c.rank() << " from " << src;
        }
      }
    }
  });
}

TEST_P(Collectives, InterleavedCollectivesKeepTheirOrder) {
  const auto [W, through_backend] = GetParam();
  on_communicators(W, through_backend, [W](Communicator& c) {
    for (int round = 0; round < 50; ++round) {
      std::vector<float> a(1, float(c.rank() + round)), ag(W);
      c.all_gather(a.data(), ag.data(), 1, DType::f32, nullptr);
      std::vector<float> rs_send(W, float(round)), rs(1);
      c.reduce_scatter_sum(rs_send.data(), rs.data(), 1, nullptr);
      std::vector<float> x(W), y(W);
      for (int d = 0; d < W; ++d) x[d] = float(c.rank() * W + d);
      c.all_to_all(x.data(), y.data(), 1, DType::f32, nullptr);
      for (int r = 0; r < W; ++r) {
        ASSERT_EQ(ag[r], float(r + round));
        ASSERT_EQ(y[r], float(r * W + c.rank()));
      }
      ASSERT_EQ(rs[0], float(W * round));
    }
  });
}

TEST_P(Collectives, ZeroCountIsANoOp) {
  const auto [W, through_backend] = GetParam();
  on_communicators(W, through_backend, [W](Communicator& c) {
    float send[1] = {1.0f}, recv[8] = {5, 5, 5, 5, 5, 5, 5, 5};
    c.all_gather(send, recv, 0, DType::f32, nullptr);
    c.all_to_all(send, recv, 0, DType::f32, nullptr);
    c.reduce_scatter_sum(send, recv, 0, nullptr);
    for (int i = 0; i < W; ++i) EXPECT_EQ(recv[i], 5.0f);
  });
}

INSTANTIATE_TEST_SUITE_P(World, Collectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return "W" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_backend" : "_host");
                         });

TEST(InProcessGroup, RejectsBadWorldAndRank) {
  for (int w : {0, -1}) {
    try {
      InProcessGroup g(w);
      ADD_FAILURE() << "world " << w << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_EQ(e.argument(), "world");
    }
  }
  InProcessGroup g(3);
  for (int r : {-1, 3, 7}) {
    try {
      InProcessCommunicator c(g, r);
      ADD_FAILURE() << "rank " << r << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::out_of_range);
      EXPECT_EQ(e.argument(), "rank");
    }
  }
  InProcessCommunicator ok(g, 2);
  EXPECT_EQ(ok.rank(), 2);
  EXPECT_EQ(ok.world(), 3);
}

}  // namespace
}  // namespace dcpmla
