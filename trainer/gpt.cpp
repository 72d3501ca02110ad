#include "trainer/gpt.hpp"

#include <cmath>

#include "core/error.hpp"

namespace foresight::trainer {

namespace {
constexpr int kLayerParams = 12;  // LayerTensors members, in declaration order
constexpr float kInitStd = 0.02f;  // GPT-2 (Radford et al. 2019)
}  // namespace

GptStage::GptStage(const ModelSpec& model, const RankLayout& layout, const StageConfig& config, ParamStore& store)
    : model_(model),
      layout_(layout),
      recompute_(config.recompute),
      recompute_layers_(config.recompute_layers),
      virtual_stage_(config.chunk * layout.pp + layout.pp_rank),
      virtual_stages_(config.chunks * layout.pp),
      store_(store) {
  const int tp = layout.tp;
  dims_ = LayerDims{.batch = config.micro_batch,
                    .seq = model.seq_len,
                    .hidden = model.hidden,
                    .heads = model.heads / tp,
                    .head_dim = model.head_dim(),
                    .ffn = model.ffn_hidden / tp,
                    .tp = tp,
                    .sequence_parallel = config.sequence_parallel && tp > 1};
  const std::vector<int> lens = config.token_slices.empty() ? std::vector<int>{model.seq_len} : config.token_slices;
  for (int len : lens) {
    slice_off_.push_back(slice_len_.empty() ? 0 : slice_off_.back() + slice_len_.back());
    slice_len_.push_back(len);
    FORESIGHT_CHECK((std::int64_t(dims_.batch) * len) % tp == 0 || !dims_.sequence_parallel)
        << "tokens " << dims_.batch * len << " over tp " << tp;
  }
  FORESIGHT_CHECK(slice_off_.back() + slice_len_.back() == model.seq_len) << "slices do not sum to seq_len";
  vocab_offset_ = std::int64_t(model.vocab / tp) * layout.tp_rank;
  const std::int64_t h = model.hidden, f = model.ffn_hidden, V = model.vocab;
  const bool lead = layout.tp_rank == 0;  // counts tensor-parallel replicas in the gradient norm
  // GPT-2 scales the residual-output projections by 1/sqrt(2 * layers).
  const float out_std = kInitStd / std::sqrt(2.0f * float(model.layers));
  auto declare = [&](std::string name, std::int64_t r, std::int64_t c, Split s, Init i, float stddev = 0,
                     bool duplicate = false, bool expert = false) {
    return store.declare(ParamDecl{.name = std::move(name), .rows = r, .cols = c, .split = s, .init = i,
                                   .stddev = stddev, .weight_decay = r > 1,  // matrices only
                                   .in_grad_norm = !duplicate && (s != Split::none || lead),
                                   .expert = expert});
  };
  if (embeds()) {
    wte_ = declare("wte", V, h, Split::rows, Init::normal, kInitStd);
    wpe_ = declare("wpe", model.seq_len, h, Split::none, Init::normal, kInitStd / 2);
  }
  const int per_stage = config.layers >= 0 ? config.layers : model.layers / virtual_stages_;
  const int first_layer = config.layers >= 0 ? config.first_layer : virtual_stage_ * per_stage;
  ep_comm_ = config.ep_comm;
  for (int l = 0; l < per_stage; ++l) {
    const int global_layer = first_layer + l;
    const std::string p = "layers." + std::to_string(global_layer) + ".";
    LayerIndex li;
    li.first = declare(p + "ln1_g", 1, h, Split::none, Init::ones);
    declare(p + "ln1_b", 1, h, Split::none, Init::zeros);
    declare(p + "w_qkv", h, 3 * h, Split::qkv_heads, Init::normal, kInitStd);
    declare(p + "b_qkv", 1, 3 * h, Split::qkv_heads, Init::zeros);
    declare(p + "w_o", h, h, Split::rows, Init::normal, out_std);
    declare(p + "b_o", 1, h, Split::none, Init::zeros);
    declare(p + "ln2_g", 1, h, Split::none, Init::ones);
    declare(p + "ln2_b", 1, h, Split::none, Init::zeros);
    // DeepSpeed-MoE's placement (ModelSpec::is_moe_layer, the rule the cost models use).
    if (model.is_moe_layer(global_layer)) {
      FORESIGHT_CHECK(ep_comm_) << "MoE layer without an expert-parallel group";
      declare(p + "router", h, model.moe->experts, Split::none, Init::normal, kInitStd);
      const int local = model.moe->experts / ep_comm_->size();
      for (int j = 0; j < local; ++j) {
        // Named by the global expert id, so every layout initialises expert e alike.
        const std::string e = p + "experts." + std::to_string(ep_comm_->rank() * local + j) + ".";
        auto expert = [&](std::string name, std::int64_t r, std::int64_t c, Init i, float stddev = 0) {
          declare(e + name, r, c, Split::none, i, stddev, false, /*expert=*/true);
        };
        expert("w_fc1", h, f, Init::normal, kInitStd);
        expert("b_fc1", 1, f, Init::zeros);
        expert("w_fc2", f, h, Init::normal, out_std);
        expert("b_fc2", 1, h, Init::zeros);
      }
      li.count = 9 + 4 * local;
    } else {
      declare(p + "w_fc1", h, f, Split::columns, Init::normal, kInitStd);
      declare(p + "b_fc1", 1, f, Split::columns, Init::zeros);
      declare(p + "w_fc2", f, h, Split::rows, Init::normal, out_std);
      declare(p + "b_fc2", 1, h, Split::none, Init::zeros);
      li.count = kLayerParams;
    }
    layers_.push_back(li);
  }
  offloaded_layers_ = offloaded_layers(config.offload_activations, per_stage);
  if (has_head()) {
    lnf_g_ = declare("lnf_g", 1, h, Split::none, Init::ones);
    lnf_b_ = declare("lnf_b", 1, h, Split::none, Init::zeros);
    if (!embeds()) {
      // The tied output layer's copy: same name, so the same initial values as the first stage's.
      wte_ = declare("wte", V, h, Split::rows, Init::normal, kInitStd, /*duplicate=*/true);
    }
  }
}

LayerTensors GptStage::layer_tensors(int layer, bool grads) const {
  const LayerIndex& li = layers_[std::size_t(layer)];
  auto t = [&](int k) {
    if (li.count != kLayerParams && k >= 8) return Tensor{};  // MoE layer: no dense MLP
    const Param& p = store_[li.first + k];
    return grads ? p.grad : p.value;
  };
  return LayerTensors{t(0), t(1), t(2), t(3), t(4), t(5), t(6), t(7), t(8), t(9), t(10), t(11)};
}

std::optional<MoeLayer> GptStage::moe_layer(int layer) const {
  const LayerIndex& li = layers_[std::size_t(layer)];
  if (li.count == kLayerParams) return std::nullopt;
  MoeLayer m;
  m.ep = ep_comm_;
  m.dims = MoeDims{.tokens = dims_.tokens(),  // every token of the micro-batch, on every tp rank
                   .hidden = dims_.hidden,
                   .ffn = model_.ffn_hidden,
                   .experts = model_.moe->experts,
                   .top_k = model_.moe->top_k,
                   .ep = ep_comm_->size(),
                   .capacity_factor = model_.moe->capacity_factor};
  m.values.router = store_[li.first + 8].value;
  m.grads.router = store_[li.first + 8].grad;
  for (int j = 0; j < m.dims.local_experts(); ++j) {
    const int base = li.first + 9 + 4 * j;
    m.values.w_fc1.push_back(store_[base].value);
    m.values.b_fc1.push_back(store_[base + 1].value);
    m.values.w_fc2.push_back(store_[base + 2].value);
    m.values.b_fc2.push_back(store_[base + 3].value);
    m.grads.w_fc1.push_back(store_[base].grad);
    m.grads.b_fc1.push_back(store_[base + 1].grad);
    m.grads.w_fc2.push_back(store_[base + 2].grad);
    m.grads.b_fc2.push_back(store_[base + 3].grad);
  }
  return m;
}

std::int64_t GptStage::take_offload_bytes() {
  const std::int64_t b = offload_.bytes_moved();
  offload_.reset_counter();
  return b;
}

TokenPositions GptStage::positions(const LayerDims& d) const {
  return TokenPositions{.first_row = d.sequence_parallel ? d.local_tokens() * layout_.tp_rank : 0,
                        .period = d.seq,
                        .offset = d.past};
}

LayerDims GptStage::unit_dims(int id) const {
  const int k = id % slices();
  LayerDims d = dims_;
  d.seq = slice_len_[std::size_t(k)];
  d.past = slice_off_[std::size_t(k)];
  return d;
}

MicroBatch GptStage::slice_data(int id, const MicroBatch& data) const {
  if (slices() == 1) return data;
  const LayerDims d = unit_dims(id);
  MicroBatch m;
  for (int b = 0; b < d.batch; ++b)
    for (int t = d.past; t < d.past + d.seq; ++t) {
      const std::size_t i = std::size_t(b) * std::size_t(dims_.seq) + std::size_t(t);
      m.inputs.push_back(data.inputs[i]);
      m.targets.push_back(data.targets[i]);
    }
  return m;
}

Tensor GptStage::forward(Backend& be, Communicator& tp, int id, const MicroBatch& batch, const Tensor& input) {
  FORESIGHT_CHECK(!stash_.count(id)) << "unit " << id << " forwarded twice";
  Stash& s = stash_[id];
  const LayerDims d = unit_dims(id);
  const MicroBatch data = slice_data(id, batch);
  const int mb = id / slices(), slice = id % slices();
  // TeraPipe: the K/V of the micro-batch's slices so far, per layer, kept until its last slice.
  const bool keep_kv = slice < slices() - 1;
  std::vector<Tensor>* cache = slices() > 1 ? &kv_cache_[mb] : nullptr;
  if (cache) cache->resize(layers_.size());
  const std::int64_t N = d.tokens();
  Tensor x;
  if (embeds()) {
    Tensor e = be.zeros(N, d.hidden);
    be.embedding_forward(e, store_[wte_].value, data.inputs, vocab_offset_);
    x = reduce_tokens(be, tp, d, e);  // each rank filled the rows of its vocabulary range
    be.add_positions(x, store_[wpe_].value, positions(d));
  } else {
    x = input;
  }
  s.layers.resize(layers_.size());
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    LayerActivations& a = s.layers[l];
    a.x = x;
    if (slice > 0) a.past_kv = (*cache)[l];
    const std::optional<MoeLayer> moe = moe_layer(int(l));
    layer_forward(be, tp, d, layer_tensors(int(l), false), a, moe ? &*moe : nullptr);
    if (keep_kv) (*cache)[l] = attention_context(a);  // what the next slice attends to
    x = a.out;
    if (recomputes(int(l))) a.keep_input_only();
    if (recompute_ == Recompute::selective) a.drop_attention_core();
    if (int(l) < offloaded_layers_) offload_.offload(be, offload_key(id, int(l)), a);
  }
  if (cache && !keep_kv) kv_cache_.erase(mb);  // the micro-batch's last slice: nobody attends further
  if (!has_head()) return x;
  s.final_in = x;
  head_forward(be, tp, d, data, s);
  return Tensor{};
}

void GptStage::head_forward(Backend& be, Communicator& tp, const LayerDims& d, const MicroBatch& data, Stash& s) {
  const std::int64_t N = d.tokens(), n = d.local_tokens();
  Tensor xf = be.zeros(n, d.hidden);
  s.meanf = be.zeros_fp32(n, 1);
  s.rstdf = be.zeros_fp32(n, 1);
  be.layernorm_forward(xf, s.meanf, s.rstdf, s.final_in, store_[lnf_g_].value, store_[lnf_b_].value);
  s.xf = gather_tokens(be, tp, d, xf);  // (N, h)
  const Tensor& wte = store_[wte_].value;  // (V/tp, h)
  s.logits = be.zeros(N, wte.rows());
  be.matmul(s.logits, s.xf, false, wte, true, false);
  // The cross-entropy's statistics in fp32 (Megatron-LM computes the loss on fp32 logits).
  s.row_max = be.zeros_fp32(N, 1);
  be.logits_row_max(s.row_max, s.logits);
  tp.all_reduce(s.row_max, ReduceOp::max);
  s.stats = be.zeros_fp32(N, 2);
  be.logits_sum_exp_and_target(s.stats, s.logits, s.row_max, data.targets, vocab_offset_);
  tp.all_reduce(s.stats, ReduceOp::sum);
  s.loss_sum = be.cross_entropy_loss_sum(s.row_max, s.stats);
}

Tensor GptStage::backward(Backend& be, Communicator& tp, int id, const MicroBatch& batch, const Tensor& grad_output,
                          float loss_scale, const std::function<void(int)>& ready) {
  auto it = stash_.find(id);
  FORESIGHT_CHECK(it != stash_.end()) << "backward of unit " << id << " before its forward";
  Stash& s = it->second;
  const LayerDims d = unit_dims(id);
  const MicroBatch data = slice_data(id, batch);
  const int mb = id / slices(), slice = id % slices();
  // TeraPipe: key/value gradients shared by the micro-batch's slices, from its last slice back.
  std::vector<Tensor>* kv_grad = nullptr;
  if (slices() > 1) {
    auto [g, fresh] = kv_grad_.try_emplace(mb);
    FORESIGHT_CHECK(!fresh || slice == slices() - 1) << "slice " << slice << " of micro-batch " << mb << " out of order";
    if (fresh)
      for (std::size_t l = 0; l < layers_.size(); ++l)
        // An accumulator over slices: fp32 (layer_backward rounds its sum once under bf16).
        g->second.push_back(be.zeros_fp32(std::int64_t(dims_.batch) * dims_.seq, 3 * std::int64_t(dims_.heads) * dims_.head_dim));
    kv_grad = &g->second;
  }
  const std::int64_t N = d.tokens(), n = d.local_tokens();
  Tensor dx;
  if (has_head()) {
    const Param& wte = store_[wte_];
    Tensor dlogits = be.zeros(N, wte.value.rows());
    be.cross_entropy_backward(dlogits, s.logits, s.row_max, s.stats, data.targets, vocab_offset_, loss_scale);
    be.matmul(wte.grad, dlogits, true, s.xf, false, true);
    Tensor dxf_partial = be.zeros(N, d.hidden);
    be.matmul(dxf_partial, dlogits, false, wte.value, false, false);
    const Tensor dxf = reduce_tokens(be, tp, d, dxf_partial);  // each rank saw its vocabulary range only
    dx = be.zeros(n, d.hidden);
    if (d.sequence_parallel) {
      // The final LayerNorm saw this rank's tokens only: sum its gradient over the group.
      Tensor dlnf = be.zeros_fp32(2, d.hidden);  // weight gradients: fp32
      be.layernorm_backward(dx, dlnf.row_slice(0, 1), dlnf.row_slice(1, 1), dxf, s.final_in, s.meanf, s.rstdf,
                            store_[lnf_g_].value);
      tp.all_reduce(dlnf, ReduceOp::sum);
      be.add(store_[lnf_g_].grad, dlnf.row_slice(0, 1));
      be.add(store_[lnf_b_].grad, dlnf.row_slice(1, 1));
    } else {
      be.layernorm_backward(dx, store_[lnf_g_].grad, store_[lnf_b_].grad, dxf, s.final_in, s.meanf, s.rstdf,
                            store_[lnf_g_].value);
    }
    if (!embeds()) ready(wte_);
    ready(lnf_b_);
    ready(lnf_g_);
  } else {
    dx = grad_output;
  }
  for (int l = int(layers_.size()) - 1; l >= 0; --l) {
    LayerActivations& a = s.layers[std::size_t(l)];
    if (l < offloaded_layers_) offload_.restore(be, offload_key(id, l), a);
    std::optional<MoeLayer> moe = moe_layer(l);
    // The load-balancing loss of this router call, weighed like its N tokens' cross-entropy.
    if (moe) moe->aux_scale = double(loss_scale) * double(moe->dims.tokens);
    if (recomputes(l)) layer_forward(be, tp, d, layer_tensors(l, false), a, moe ? &*moe : nullptr);
    dx = layer_backward(be, tp, d, layer_tensors(l, false), layer_tensors(l, true), a, dx,
                        kv_grad ? (*kv_grad)[std::size_t(l)] : Tensor{}, moe ? &*moe : nullptr);
    a = LayerActivations{};
    for (int k = layers_[std::size_t(l)].count - 1; k >= 0; --k) ready(layers_[std::size_t(l)].first + k);
  }
  if (embeds()) {
    const Tensor dx_full = gather_tokens(be, tp, d, dx);
    be.positions_backward(store_[wpe_].grad, dx_full, TokenPositions{.first_row = 0, .period = d.seq, .offset = d.past});
    be.embedding_backward(store_[wte_].grad, dx_full, data.inputs, vocab_offset_);
    ready(wpe_);
    ready(wte_);
    dx = Tensor{};
  }
  stash_.erase(it);
  if (kv_grad && slice == 0) kv_grad_.erase(mb);  // the micro-batch's first slice ends its backward
  return dx;
}

}  // namespace foresight::trainer
