#include "rank_step.h"

#include <cmath>
#include <random>
#include <vector>

#include "dcpmla/cuda_backend.h"
#include "dcpmla/numeric.h"
#include "event_timer.h"

namespace dcpmla::bench {
namespace {

std::vector<std::uint16_t> random_bf16(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(normal(rng));
  return v;
}

// Fills `bytes` of device memory with random bf16: one uploaded block, doubled by device copies.
void fill_random(Backend& be, void* dst, std::size_t bytes, std::uint64_t seed, cudaStream_t s) {
  const std::size_t block = std::min<std::size_t>(bytes, std::size_t(4) << 20) & ~std::size_t(1);
  if (block == 0) return;
  const auto host = random_bf16(block / 2, seed);
  be.upload(dst, host.data(), block, s);
  auto* base = static_cast<std::uint8_t*>(dst);
  for (std::size_t done = block; done < bytes;) {
    const std::size_t n = std::min(done, bytes - done);
    be.copy(base + done, base, n, s);
    done += n;
  }
}

}  // namespace

RankStep::RankStep(int rank, int world, const Shape& shape, const ShapeBatch& sb, int block_size,
                   int target_work_items)
    : rank_(rank), backend_(make_cuda_backend(rank)) {
  check_cuda(cudaSetDevice(rank), "cudaSetDevice");
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  const Batch& batch = sb.batch;
  const int H = shape.heads, Hl = H / world;
  const Sharding sharding{world, rank, 1};
  // A fixed work-item target is a model of that many workers; by default the GPU's own.
  DeviceModel model = backend_->device_model();
  if (target_work_items > 0) model.workers = target_work_items;
  plan_ = make_plan(batch, {sharding, H, block_size, sb.num_blocks, model, 0});
  const std::int64_t N = plan_.num_rows;

  cache_ref_ = {nullptr, DType::bf16, sb.num_blocks, block_size, 1.0f};
  cache_ = DeviceBuffer(*backend_, cache_ref_.bytes());
  cache_ref_.data = cache_.data();
  fill_random(*backend_, cache_.data(), cache_.bytes(), 11 + rank, stream_);
  block_table_ = DeviceBuffer(*backend_, batch.block_table.size() * 4);
  backend_->upload(block_table_.data(), batch.block_table.data(), block_table_.bytes(), stream_);
  const auto q_host = random_bf16(std::size_t(N) * Hl * kHeadDim, 101 + rank);
  q_ = DeviceBuffer(*backend_, q_host.size() * 2);
  backend_->upload(q_.data(), q_host.data(), q_.bytes(), stream_);
  out_ = DeviceBuffer(*backend_, std::size_t(N) * Hl * kLatentDim * 2);
  lse_ = DeviceBuffer(*backend_, std::size_t(N) * Hl * 4);
  workspace_ = std::make_unique<DcpWorkspace>(*backend_, world, N, Hl, DType::bf16,
                                              decode_workspace_bytes(plan_));

  args_.plan = &plan_;
  args_.q_local = q_.tensor(DType::bf16, {N, Hl, kHeadDim});
  args_.cache = cache_ref_;
  args_.block_table = block_table_.tensor(DType::i32, {batch.num_requests(), batch.max_blocks});
  args_.out = out_.tensor(DType::bf16, {N, Hl, kLatentDim});
  args_.lse = lse_.tensor(DType::f32, {N, Hl});
  args_.softmax_scale = 0.1352338f;  // DeepSeek-V3's
  synchronize();
}

RankStep::~RankStep() {
  cudaSetDevice(rank_);
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

void RankStep::run(Communicator& comm, Combine combine, DType payload,
                   testing::CallObserver* observer) {
  args_.combine = combine;
  args_.combine_payload = payload;
  if (observer == nullptr) {
    dcp_step(*backend_, comm, *workspace_, args_, stream_);
    return;
  }
  testing::ObservedBackend backend(*backend_, *observer);
  testing::ObservedCommunicator observed(comm, *observer);
  dcp_step(backend, observed, *workspace_, args_, stream_);
}

void RankStep::synchronize() {
  backend_->synchronize(stream_);
}

bool RankStep::output_finite() {
  std::vector<float> lse(std::size_t(lse_.bytes() / 4));
  backend_->download(lse.data(), lse_.data(), lse_.bytes(), stream_);
  synchronize();
  for (float x : lse) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

double RankStep::kv_bytes() const {
  double tokens = 0;
  for (auto len : plan_.request_local_len) tokens += double(len);
  return tokens * kHeadDim * 2;
}

}  // namespace dcpmla::bench
