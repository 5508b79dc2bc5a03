// hf::HfReader and hf::write_folder: every element of every tensor shard lands where the
// Hugging Face layout puts it (nn.Linear's [out, in] transposed, q | k | v fused by columns,
// vocabulary padding 0), reading only the requested range; export and import are inverse; a
// checkpoint of another model is refused naming the tensor or the config key.
#include "executor/hf_weights.hpp"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/io/safetensors.hpp"
#include "executor/model/params.hpp"
#include "model/tiny.hpp"
#include "support.hpp"

namespace stagecraft::executor {
namespace {

namespace fs = std::filesystem;
namespace st = io::safetensors;

struct Scratch {
  fs::path dir = stagecraft::test::temp_path("hf");
  Scratch() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
};

// Element e of Hugging Face tensor number k holds 1000 k + e (exact in float for these sizes).
float code(int64_t k, int64_t e) { return static_cast<float>(1000 * k + e); }

struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// tiny_llama's tensors as transformers' LlamaForCausalLM names and shapes them (h 8, q 8, kv 4,
// f 12, V 11; nn.Linear weights [out, in]).
std::vector<HfTensor> llama_tensors(const spec::Model& m) {
  const int64_t h = m.hidden, q = m.q_dim(), kv = m.kv_dim(), f = m.ffn_hidden, v = m.vocab;
  std::vector<HfTensor> t = {{"model.embed_tokens.weight", {v, h}}};
  for (int64_t i = 0; i < m.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    t.push_back({p + "input_layernorm.weight", {h}});
    t.push_back({p + "self_attn.q_proj.weight", {q, h}});
    t.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    t.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    t.push_back({p + "self_attn.o_proj.weight", {h, q}});
    t.push_back({p + "post_attention_layernorm.weight", {h}});
    t.push_back({p + "mlp.gate_proj.weight", {f, h}});
    t.push_back({p + "mlp.up_proj.weight", {f, h}});
    t.push_back({p + "mlp.down_proj.weight", {h, f}});
  }
  t.push_back({"model.norm.weight", {h}});
  t.push_back({"lm_head.weight", {v, h}});
  return t;
}

int64_t index_of(const std::vector<HfTensor>& ts, const std::string& name) {
  for (std::size_t k = 0; k < ts.size(); ++k) {
    if (ts[k].name == name) return static_cast<int64_t>(k);
  }
  ADD_FAILURE() << "no " << name;
  return -1;
}

void write_checkpoint(const fs::path& dir, const spec::Model& m, const std::vector<HfTensor>& ts,
                      const std::string& skip = "") {
  std::vector<std::vector<float>> data;
  std::vector<st::WriteTensor> w;
  data.reserve(ts.size());
  for (std::size_t k = 0; k < ts.size(); ++k) {
    if (ts[k].name == skip) continue;
    int64_t n = 1;
    for (int64_t d : ts[k].shape) n *= d;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (int64_t e = 0; e < n; ++e) v[static_cast<std::size_t>(e)] = code(static_cast<int64_t>(k), e);
    data.push_back(std::move(v));
    w.push_back({ts[k].name, ts[k].shape, data.back()});
  }
  st::write((dir / "model.safetensors").string(), w, st::Dtype::kF32);
  std::ofstream(dir / "config.json") << hf::config_json(m, "float32").dump(1);
}

// What our element (global row R, column C) of tensor `ours` must hold, derived from the layout
// of the table above: LLaMA stores every linear transposed, the fused q | k | v by column bands.
float expected_llama(const spec::Model& m, const std::vector<HfTensor>& ts, const std::string& ours, int64_t R, int64_t C) {
  const int64_t h = m.hidden, q = m.q_dim(), kv = m.kv_dim(), f = m.ffn_hidden;
  if (ours == "embedding.wte") return code(index_of(ts, "model.embed_tokens.weight"), R * h + C);
  if (ours == "head.normf.w") return code(index_of(ts, "model.norm.weight"), C);
  if (ours == "head.lm_head.w") return code(index_of(ts, "lm_head.weight"), C * h + R);
  const std::string i = ours.substr(6, ours.find('.', 6) - 6), p = "model.layers." + i + ".";
  if (ours.ends_with("attn.norm1.w")) return code(index_of(ts, p + "input_layernorm.weight"), C);
  if (ours.ends_with("mlp.norm2.w")) return code(index_of(ts, p + "post_attention_layernorm.weight"), C);
  if (ours.ends_with("attn.qkv.w")) {
    if (C < q) return code(index_of(ts, p + "self_attn.q_proj.weight"), C * h + R);
    if (C < q + kv) return code(index_of(ts, p + "self_attn.k_proj.weight"), (C - q) * h + R);
    return code(index_of(ts, p + "self_attn.v_proj.weight"), (C - q - kv) * h + R);
  }
  if (ours.ends_with("attn.out.w")) return code(index_of(ts, p + "self_attn.o_proj.weight"), C * q + R);
  if (ours.ends_with("mlp.gate.w")) return code(index_of(ts, p + "mlp.gate_proj.weight"), C * h + R);
  if (ours.ends_with("mlp.up.w")) return code(index_of(ts, p + "mlp.up_proj.weight"), C * h + R);
  if (ours.ends_with("mlp.down.w")) return code(index_of(ts, p + "mlp.down_proj.weight"), C * f + R);
  ADD_FAILURE() << "no rule for " << ours;
  return 0;
}

TEST(HfWeights, EveryTensorParallelShardElementLandsWhereTheLayoutSays) {
  Scratch s;
  const spec::Model m = test::tiny_llama();
  const std::vector<HfTensor> ts = llama_tensors(m);
  write_checkpoint(s.dir, m, ts);
  hf::HfReader reader(m, s.dir.string());
  int64_t checked = 0, padding = 0;
  for (int64_t tp_index = 0; tp_index < 2; ++tp_index) {
    const ParamLayout layout(m, 0, unit_count(m), 2, tp_index);
    for (const TensorSlot& t : layout.tensors()) {
      // a range that starts and ends inside rows, as a ZeRO-3 shard does
      const int64_t lo = t.size() > 2 ? 1 : 0, hi = t.size() > 2 ? t.size() - 1 : t.size();
      std::vector<float> out(static_cast<std::size_t>(hi - lo), -1.0f);
      reader.read(t, lo, hi, out);
      for (int64_t p = lo; p < hi; ++p) {
        const int64_t g = t.map.global_index(t.spec, p / t.cols, p % t.cols);
        const float want = g < 0 ? 0.0f : expected_llama(m, ts, t.name, g / t.spec.global_cols, g % t.spec.global_cols);
        ASSERT_EQ(out[static_cast<std::size_t>(p - lo)], want) << t.name << " tp rank " << tp_index << " position " << p;
        ++checked;
        padding += g < 0;
      }
    }
  }
  // vocab 11 over 2 ranks: 6 rows per rank, rank 1's last row of wte and column of lm_head pad
  EXPECT_EQ(padding, m.hidden - 1 + m.hidden - 1);  // the range [1, size - 1) drops one padded element of each
  EXPECT_GT(checked, 0);
}

// Mixtral's experts: expert e's w1 / w3 / w2 ([f, h], [f, h], [h, f]) fill rows [e·in, (e+1)·in)
// of our stacked gate / up / down [E·in x out], each transposed: our (R, C) of experts.gate.w is
// w1 of expert R / h, element C · h + R % h; the router [h x E] is block_sparse_moe.gate [E, h]
// transposed.
TEST(HfWeights, MixtralExpertsFillTheirBandsOfTheStackedTensors) {
  Scratch s;
  spec::Model m = test::tiny_llama();
  m.moe.experts = 3, m.moe.top_k = 2, m.moe.ffn_hidden = 5;
  const int64_t h = m.hidden, f = 5, E = 3;
  std::vector<HfTensor> ts;
  for (const HfTensor& t : llama_tensors(m)) {
    if (t.name.find(".mlp.") == std::string::npos) ts.push_back(t);
  }
  for (int64_t i = 0; i < m.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".block_sparse_moe.";
    ts.push_back({p + "gate.weight", {E, h}});
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = p + "experts." + std::to_string(e) + ".";
      ts.push_back({x + "w1.weight", {f, h}});
      ts.push_back({x + "w3.weight", {f, h}});
      ts.push_back({x + "w2.weight", {h, f}});
    }
  }
  write_checkpoint(s.dir, m, ts);
  hf::HfReader reader(m, s.dir.string());
  const ParamLayout layout(m);
  int64_t checked = 0;
  for (const TensorSlot& t : layout.tensors()) {
    if (t.name.find(".mlp.") == std::string::npos || t.name.find("norm2") != std::string::npos) continue;
    const std::string p = "model.layers." + t.name.substr(6, t.name.find('.', 6) - 6) + ".block_sparse_moe.";
    const int64_t lo = 3, hi = t.size() - 2;  // inside rows at both ends
    std::vector<float> out(static_cast<std::size_t>(hi - lo));
    reader.read(t, lo, hi, out);
    for (int64_t q = lo; q < hi; ++q) {
      const int64_t R = q / t.cols, C = q % t.cols;
      float want = 0;
      if (t.name.ends_with("router.w")) {
        want = code(index_of(ts, p + "gate.weight"), C * h + R);
      } else {
        const bool down = t.name.ends_with("down.w");
        const int64_t in = down ? f : h, e = R / in, r = R % in;
        const std::string w = t.name.ends_with("gate.w") ? "w1" : t.name.ends_with("up.w") ? "w3" : "w2";
        want = code(index_of(ts, p + "experts." + std::to_string(e) + "." + w + ".weight"), C * in + r);
      }
      ASSERT_EQ(out[static_cast<std::size_t>(q - lo)], want) << t.name << " position " << q;
      ++checked;
    }
  }
  EXPECT_EQ(checked, m.layers * ((h * E - 5) + 3 * (E * h * f - 5)));
}

TEST(HfWeights, ReadsOnlyTheRequestedBytes) {
  Scratch s;
  const spec::Model m = test::tiny_llama();
  write_checkpoint(s.dir, m, llama_tensors(m));
  hf::HfReader reader(m, s.dir.string());
  const ParamLayout layout(m);
  const TensorSlot& up = layout.find("block.0.mlp.up.w");  // [8 x 12], stored [12, 8]
  std::vector<float> out(12);
  reader.read(up, 12, 24, out);  // our row 1: column 1 of each of the 12 stored rows
  EXPECT_EQ(reader.bytes_read(), 12 * 4);
}

TEST(HfWeights, ExportThenImportGivesTheSameValues) {
  Scratch s;
  spec::Model mixtral = test::tiny_llama();
  mixtral.name = "tiny-mixtral";
  mixtral.moe.experts = 3, mixtral.moe.top_k = 2, mixtral.moe.ffn_hidden = 5;
  spec::Model qwen2_moe = mixtral;  // Qwen2's q/k/v biases, a gated shared expert, block 0 dense
  qwen2_moe.name = "tiny-qwen2-moe";
  qwen2_moe.qkv_bias = true;
  qwen2_moe.moe.shared_ffn_hidden = 6, qwen2_moe.moe.shared_gate = true, qwen2_moe.moe.dense_layers = {0};
  qwen2_moe.moe.normalize_top_k = false;
  spec::Model qwen3 = test::tiny_llama();  // q/k norms per head, an explicit head_dim
  qwen3.name = "tiny-qwen3";
  qwen3.qk_norm = true, qwen3.head_size = 4;
  spec::Model qwen3_moe = qwen3;  // experts without a shared one, block 0 dense
  qwen3_moe.name = "tiny-qwen3-moe";
  qwen3_moe.moe.experts = 3, qwen3_moe.moe.top_k = 2, qwen3_moe.moe.ffn_hidden = 5, qwen3_moe.moe.dense_layers = {0};
  spec::Model olmoe = mixtral;  // q/k norms over the whole projections, top k not renormalised
  olmoe.name = "tiny-olmoe";
  olmoe.qk_norm = olmoe.qk_norm_whole = true, olmoe.moe.normalize_top_k = false;
  ASSERT_EQ(hf::family_of(mixtral), hf::Family::kMixtral);
  ASSERT_EQ(hf::family_of(qwen2_moe), hf::Family::kQwen2Moe);
  ASSERT_EQ(hf::family_of(qwen3), hf::Family::kQwen3);
  ASSERT_EQ(hf::family_of(qwen3_moe), hf::Family::kQwen3Moe);
  ASSERT_EQ(hf::family_of(olmoe), hf::Family::kOlmoe);
  for (const spec::Model& m : {test::tiny_llama(), test::tiny_gpt(), mixtral, qwen2_moe, qwen3, qwen3_moe, olmoe}) {
    const ParamLayout layout(m);
    std::vector<float> values(static_cast<std::size_t>(layout.size()));
    layout.init<float>(values, 7);
    const fs::path dir = s.dir / m.name;
    hf::write_folder(m, values, dir.string(), st::Dtype::kF32);
    ASSERT_TRUE(fs::exists(dir / "generation_config.json"));
    hf::HfReader reader(m, dir.string());
    std::vector<float> back(values.size());
    for (const TensorSlot& t : layout.tensors()) {
      reader.read(t, 0, t.size(), std::span<float>(back).subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.size())));
    }
    EXPECT_EQ(back, values) << m.name;
  }
}

TEST(HfWeights, RefusesAnotherModelNamingTheTensorOrKey) {
  Scratch s;
  const spec::Model m = test::tiny_llama();
  const std::vector<HfTensor> ts = llama_tensors(m);
  write_checkpoint(s.dir, m, ts, "model.layers.1.mlp.up_proj.weight");
  stagecraft::test::expect_spec_error([&] { hf::HfReader r(m, s.dir.string()); }, "/model.layers.1.mlp.up_proj.weight",
                          "missing: model 'tiny-llama' needs this llama tensor of shape [12, 8]");
  spec::Model wider = m;
  wider.ffn_hidden = 16;
  write_checkpoint(s.dir, wider, ts);  // config.json now says 16
  stagecraft::test::expect_spec_error([&] { hf::HfReader r(m, s.dir.string()); }, "", "ffn_hidden 16 (the run's model: 12)");
  std::vector<HfTensor> extra = ts;
  extra.push_back({"model.layers.2.mlp.up_proj.weight", {12, 8}});
  write_checkpoint(s.dir, m, extra);
  stagecraft::test::expect_spec_error([&] { hf::HfReader r(m, s.dir.string()); }, "/model.layers.2.mlp.up_proj.weight", "unexpected");
}

TEST(HfWeights, Gpt2IsStoredAsItsConv1DLayoutWithOrWithoutThePrefix) {
  Scratch s;
  const spec::Model m = test::tiny_gpt();
  ASSERT_TRUE(m.tied_embeddings);
  const ParamLayout layout(m);
  std::vector<float> values(static_cast<std::size_t>(layout.size()));
  layout.init<float>(values, 3);
  hf::write_folder(m, values, s.dir.string(), st::Dtype::kF32);
  st::File f((s.dir / "model.safetensors").string());
  EXPECT_EQ(f.find("lm_head.weight"), nullptr);  // tied: transformers saves no head
  const st::TensorInfo* qkv = f.find("transformer.h.0.attn.c_attn.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->shape, (std::vector<int64_t>{m.hidden, 3 * m.hidden}));  // Conv1D: [in, out], as ours
  // element (2, 5) of c_attn is our qkv.w's (2, 5)
  std::vector<float> one(1);
  f.read(*qkv, 2 * 3 * m.hidden + 5, one);
  EXPECT_EQ(one[0], values[static_cast<std::size_t>(layout.find("block.0.attn.qkv.w").offset + 2 * 3 * m.hidden + 5)]);
  // GPT2Model's own checkpoints (the hub's "gpt2") name the same tensors without "transformer."
  const fs::path bare = s.dir / "bare";
  fs::create_directories(bare);
  std::vector<std::vector<float>> data;
  std::vector<st::WriteTensor> w;
  data.reserve(f.tensors().size());
  for (const st::TensorInfo& t : f.tensors()) {
    data.emplace_back(static_cast<std::size_t>(t.elems()));
    f.read(t, 0, data.back());
    w.push_back({t.name.substr(std::string("transformer.").size()), t.shape, data.back()});
  }
  st::write((bare / "model.safetensors").string(), w, st::Dtype::kF32);
  fs::copy_file(s.dir / "config.json", bare / "config.json");
  hf::HfReader reader(m, bare.string());
  const TensorSlot& wpe = layout.find("embedding.wpe");
  std::vector<float> back(static_cast<std::size_t>(wpe.size()));
  reader.read(wpe, 0, wpe.size(), back);
  EXPECT_EQ(back, std::vector<float>(values.begin() + wpe.offset, values.begin() + wpe.offset + wpe.size()));
}

}  // namespace
}  // namespace stagecraft::executor
