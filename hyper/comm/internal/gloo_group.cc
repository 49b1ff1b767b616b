#include "hyper/comm/internal/gloo_group.h"

#include <gloo/allgatherv.h>

namespace hyper::comm::internal {

namespace {

class AllgathervWork : public c10d::ProcessGroupGloo::AsyncWork {
 public:
  AllgathervWork(std::shared_ptr<gloo::Context> context, uint32_t tag, uint64_t seq,
                 at::Tensor output, at::Tensor input, std::vector<size_t> counts,
                 std::chrono::milliseconds timeout)
      : AsyncWork(context, {{output}}, c10d::OpType::ALLGATHER, seq, timeout, "hyper:allgatherv",
                  std::optional<std::vector<at::Tensor>>({input})),
        tag_(tag),
        output_(std::move(output)),
        input_(std::move(input)),
        counts_(std::move(counts)) {}

  const std::vector<at::Tensor> getInputTensors() override { return {input_}; }
  const std::vector<at::Tensor> getOutputTensors() override { return {output_}; }

  void run() override {
    gloo::AllgathervOptions opts(context_);
    // Gloo refuses null pointers even for zero bytes; point empty buffers at a scratch byte.
    uint8_t* in = input_.numel() ? input_.data_ptr<uint8_t>() : &scratch_in_;
    uint8_t* out = output_.numel() ? output_.data_ptr<uint8_t>() : &scratch_out_;
    opts.setInput<uint8_t>(in, static_cast<size_t>(input_.numel()));
    opts.setOutput<uint8_t>(out, counts_);
    opts.setTag(tag_);
    opts.setTimeout(timeout_);
    gloo::allgatherv(opts);
  }

 private:
  uint32_t tag_;
  at::Tensor output_;
  at::Tensor input_;
  std::vector<size_t> counts_;
  uint8_t scratch_in_ = 0;
  uint8_t scratch_out_ = 0;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> HyperGlooGroup::allgatherv_bytes(at::Tensor output,
                                                                 at::Tensor input,
                                                                 std::vector<size_t> counts) {
  const uint32_t tag = nextTag();
  auto context = getContext(tag);
  ++seq_;  // as ProcessGroupGloo's own collectives: the new value is this work's
  auto work = c10::make_intrusive<AllgathervWork>(std::move(context), tag, seq_, std::move(output),
                                                  std::move(input), std::move(counts),
                                                  options_->timeout);
  enqueue(work);
  return work;
}

}  // namespace hyper::comm::internal
