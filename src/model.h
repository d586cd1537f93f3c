// Model ownership: one loaded GGUF, shared by every context built on it.
#pragma once

#include "llama-cpp.h"
#include "rpc.h"

#include <memory>
#include <string>
#include <vector>

namespace llamaspec {

// What a GGUF header says, read without loading any weights.
struct GgufInfo {
    std::string path;
    std::string architecture;
    int64_t n_tensors = 0;
    bool has_markov_head = false;      // DSpark's markov_w1: tells draft-dspark from draft-dflash
    bool has_confidence_head = false;  // DSpark's conf_proj
    bool has_nextn = false;            // an MTP head on the last block
};

// Reads the GGUF header. Throws std::invalid_argument with a clear message for a missing,
// unreadable or non-GGUF file.
GgufInfo inspect_gguf(const std::string & path);

// A loaded llama.cpp model (weights + vocabulary). Immutable after load, so one Model may
// back several contexts, also from several threads.
class Model {
public:
    // repack: let llama.cpp's CPU backend repack quantized weights for speed. Its repacked kernels
    // round differently for different batch shapes, so greedy speculative output can then differ
    // from plain decoding at near-ties; repack = false keeps them bit-identical.
    // load_mtp: also load the MTP (nextn) layers a GGUF may carry, for spec_type draft-mtp.
    // rpc: "host:port" of rpc-server processes that hold n_gpu_layers of the layers (as llama.cpp's --rpc:
    // RPC devices come first, before this machine's GPUs); each is probed first, within rpc_timeout_s
    // seconds (RpcError for one that cannot be used). rpc_head_local: keep the output head (the vocabulary
    // projection) on this machine, so that a round brings back n_embd floats per position instead of n_vocab.
    explicit Model(const std::string & path, int n_gpu_layers = -1, bool repack = true, bool load_mtp = true,
                   const std::vector<std::string> & rpc = {}, double rpc_timeout_s = 5.0,
                   bool rpc_head_local = false);

    llama_model * get() const { return model_.get(); }
    const llama_vocab * vocab() const { return llama_model_get_vocab(model_.get()); }
    const GgufInfo & info() const { return info_; }
    const std::string & path() const { return info_.path; }
    const std::string & architecture() const { return info_.architecture; }
    bool is_dflash_head() const { return info_.architecture == "dflash"; }
    bool is_eagle3_head() const { return info_.architecture == "eagle3"; }
    // the MTP layers were loaded (the GGUF has them and load_mtp was on)
    bool mtp_loaded() const { return mtp_loaded_; }

    // dimension `dim` of a tensor as the GGUF header gives it, -1 when the tensor is absent
    int64_t tensor_dim(const std::string & name, int dim) const;

    int32_t n_vocab() const { return llama_vocab_n_tokens(vocab()); }
    int32_t n_layer() const { return llama_model_n_layer(model_.get()); }
    int32_t n_embd() const { return llama_model_n_embd(model_.get()); }
    // width of one row of an embedding batch (a DFlash/DSpark head: its target features, T * n_embd)
    int32_t n_embd_input() const;
    int32_t n_ctx_train() const { return llama_model_n_ctx_train(model_.get()); }

    // Bytes of cache one context of n_ctx tokens per sequence needs for this model: the attention
    // layers' F16 K/V (sliding-window layers keep at most n_swa + n_ubatch cells) and the recurrent
    // layers' F32 state, times (1 + n_rs_seq) snapshots. An estimate made before allocating anything.
    uint64_t cache_bytes(int64_t n_ctx, int32_t n_seq, int32_t n_ubatch, uint32_t n_rs_seq) const;

    // Memory free where this model's cache will live: the first GPU it uses, else host RAM
    // (MemAvailable). `where` names it for messages.
    uint64_t free_memory(std::string & where) const;

    // the GPU/accelerator devices llama.cpp places this model's offloaded layers on (n_gpu_layers of them),
    // as "NAME: description"; none on a CPU-only build
    std::vector<std::string> devices() const;

    // the RPC servers ("host:port") the model was loaded with
    const std::vector<std::string> & rpc() const { return rpc_; }

    // llama.cpp's graph for this architecture publishes the layer inputs (t_layer_inp) that
    // DFlash/DSpark/EAGLE3 heads and Context.features() read
    bool publishes_layer_features() const;

    // string metadata value, or `fallback` when the key is absent
    std::string meta(const std::string & key, const std::string & fallback = "") const;

    std::vector<llama_token> tokenize(const std::string & text, bool add_special) const;
    std::string token_to_piece(llama_token token) const;
    bool is_eog(llama_token token) const { return llama_vocab_is_eog(vocab(), token); }

private:
    GgufInfo info_;
    bool mtp_loaded_ = false;
    std::vector<std::string> rpc_;
    std::unique_ptr<RpcServers> rpc_servers_;  // declared before model_: outlives it
    llama_model_ptr model_;
};

using ModelPtr = std::shared_ptr<Model>;

// Throws std::invalid_argument (naming the sizes) when a context of n_ctx tokens for each of n_seq
// sequences (and a draft model's context of the same size, if given) cannot fit in the memory that is
// free where the model's cache lives. Called before any context is created: llama.cpp would be OOM-killed.
void ensure_cache_fits(const Model & model, int64_t n_ctx, int32_t n_seq, int32_t n_ubatch, uint32_t n_rs_seq,
                       const Model * draft = nullptr);

// "llama, qwen3, qwen35, ...": the architectures whose graphs publish layer inputs
std::string layer_feature_architectures();

// Throws std::invalid_argument when the draft cannot speak the target's vocabulary:
// a different size, a differing token text, or different BOS/EOS handling.
void check_same_vocab(const Model & target, const Model & draft);

}  // namespace llamaspec
