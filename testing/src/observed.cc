#include "dcpmla/testing/observed.h"

#include "dcpmla/error.h"

namespace dcpmla::testing {

const char* to_string(Op op) {
  switch (op) {
    case Op::write_kv:
      return "write_kv";
    case Op::decode:
      return "decode";
    case Op::unpack_query:
      return "unpack_query";
    case Op::combine_rescale:
      return "combine_rescale";
    case Op::combine_pack:
      return "combine_pack";
    case Op::combine_merge:
      return "combine_merge";
    case Op::convert:
      return "convert";
    case Op::all_gather:
      return "all_gather";
    case Op::reduce_scatter_sum:
      return "reduce_scatter_sum";
    case Op::all_to_all:
      return "all_to_all";
    case Op::all_to_all_peers:
      return "all_to_all_peers";
  }
  return "unknown";
}

bool is_collective(Op op) {
  return op == Op::all_gather || op == Op::reduce_scatter_sum || op == Op::all_to_all ||
         op == Op::all_to_all_peers;
}

namespace {

// Reports `call` around `enqueue`.
template <class F>
void observe(CallObserver& observer, const Call& call, Stream s, F&& enqueue) {
  observer.before(call, s);
  enqueue();
  observer.after(call, s);
}

}  // namespace

void ObservedBackend::write_kv(const KvWriteArgs& a, Stream s) {
  observe(observer_, {Op::write_kv}, s, [&] { inner_.write_kv(a, s); });
}
void ObservedBackend::run_decode(const DecodeArgs& a, Stream s) {
  observe(observer_, {Op::decode}, s, [&] { inner_.decode(a, s); });
}
void ObservedBackend::unpack_query(const UnpackQueryArgs& a, Stream s) {
  observe(observer_, {Op::unpack_query}, s, [&] { inner_.unpack_query(a, s); });
}
void ObservedBackend::combine_rescale(const CombineRescaleArgs& a, Stream s) {
  observe(observer_, {Op::combine_rescale}, s, [&] { inner_.combine_rescale(a, s); });
}
void ObservedBackend::combine_pack(const CombinePackArgs& a, Stream s) {
  observe(observer_, {Op::combine_pack}, s, [&] { inner_.combine_pack(a, s); });
}
void ObservedBackend::combine_merge(const CombineMergeArgs& a, Stream s) {
  observe(observer_, {Op::combine_merge}, s, [&] { inner_.combine_merge(a, s); });
}
void ObservedBackend::convert(const ConvertArgs& a, Stream s) {
  observe(observer_, {Op::convert}, s, [&] { inner_.convert(a, s); });
}

void ObservedCommunicator::all_gather(const void* send, void* recv, std::size_t count, DType dtype,
                                      Stream s) {
  observe(observer_, {Op::all_gather, send, recv, count, dtype}, s,
          [&] { inner_.all_gather(send, recv, count, dtype, s); });
}
void ObservedCommunicator::reduce_scatter_sum(const float* send, float* recv, std::size_t count,
                                              Stream s) {
  observe(observer_, {Op::reduce_scatter_sum, send, recv, count, DType::f32}, s,
          [&] { inner_.reduce_scatter_sum(send, recv, count, s); });
}
void ObservedCommunicator::all_to_all(const void* send, void* recv, std::size_t count, DType dtype,
                                      Stream s) {
  observe(observer_, {Op::all_to_all, send, recv, count, dtype}, s,
          [&] { inner_.all_to_all(send, recv, count, dtype, s); });
}
void ObservedCommunicator::all_to_all_peers(const void* send, void* recv, std::size_t count,
                                            DType dtype, Stream s) {
  observe(observer_, {Op::all_to_all_peers, send, recv, count, dtype}, s,
          [&] { inner_.all_to_all_peers(send, recv, count, dtype, s); });
}

void replay(const Call& c, Communicator& comm, Stream s) {
  switch (c.op) {
    case Op::all_gather:
      comm.all_gather(c.send, c.recv, c.count, c.dtype, s);
      return;
    case Op::reduce_scatter_sum:
      comm.reduce_scatter_sum(static_cast<const float*>(c.send), static_cast<float*>(c.recv),
                              c.count, s);
      return;
    case Op::all_to_all:
      comm.all_to_all(c.send, c.recv, c.count, c.dtype, s);
      return;
    case Op::all_to_all_peers:
      comm.all_to_all_peers(c.send, c.recv, c.count, c.dtype, s);
      return;
    default:
      throw Error(ErrorCode::invalid_argument, "call", "a collective", to_string(c.op));
  }
}

}  // namespace dcpmla::testing
