#include "model.h"

#include "gguf.h"
#include "llama-ext.h"
#include "llama-model.h"

#include "layer_feature_archs.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <sys/stat.h>

namespace llamaspec {

namespace {

struct gguf_deleter {
    void operator()(gguf_context * ctx) const { gguf_free(ctx); }
};

std::string read_magic(const std::string & path) {
    std::FILE * f = std::fopen(path.c_str(), "rb");
    if (!f) {
        throw std::invalid_argument("cannot open '" + path + "': " + std::strerror(errno));
    }
    char magic[4] = {};
    const size_t n = std::fread(magic, 1, sizeof(magic), f);
    std::fclose(f);
    return std::string(magic, n);
}

}  // namespace

GgufInfo inspect_gguf(const std::string & path) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
        throw std::invalid_argument("model file not found: '" + path + "'");
    }
    if (!S_ISREG(st.st_mode)) {
        throw std::invalid_argument("not a regular file: '" + path + "'");
    }
    if (read_magic(path) != "GGUF") {
        throw std::invalid_argument("not a GGUF file (bad magic): '" + path + "'");
    }

    gguf_init_params params = { /*no_alloc =*/ true, /*ctx =*/ nullptr };
    std::unique_ptr<gguf_context, gguf_deleter> ctx(gguf_init_from_file(path.c_str(), params));
    if (!ctx) {
        throw std::invalid_argument("corrupt or truncated GGUF header: '" + path + "'");
    }

    GgufInfo info;
    info.path = path;
    const int64_t arch_id = gguf_find_key(ctx.get(), "general.architecture");
    if (arch_id < 0 || gguf_get_kv_type(ctx.get(), arch_id) != GGUF_TYPE_STRING) {
        throw std::invalid_argument("GGUF has no general.architecture: '" + path + "'");
    }
    info.architecture = gguf_get_val_str(ctx.get(), arch_id);
    info.n_tensors = gguf_get_n_tensors(ctx.get());
    info.has_markov_head = gguf_find_tensor(ctx.get(), "markov_w1.weight") >= 0;
    info.has_confidence_head = gguf_find_tensor(ctx.get(), "conf_proj.weight") >= 0;

    const int64_t blocks_id = gguf_find_key(ctx.get(), (info.architecture + ".block_count").c_str());
    if (blocks_id >= 0 && gguf_get_kv_type(ctx.get(), blocks_id) == GGUF_TYPE_UINT32) {
        const uint32_t n_blocks = gguf_get_val_u32(ctx.get(), blocks_id);
        const std::string nextn = "blk." + std::to_string(n_blocks - 1) + ".nextn.eh_proj.weight";
        info.has_nextn = n_blocks > 0 && gguf_find_tensor(ctx.get(), nextn.c_str()) >= 0;
    }
    return info;
}

namespace {

// RPC servers first, then this machine's GPUs (integrated ones when there is no discrete GPU), NULL-terminated:
// llama.cpp's own order for --rpc
std::vector<ggml_backend_dev_t> offload_devices(const RpcServers & rpc) {
    std::vector<ggml_backend_dev_t> devices = rpc.devices(), igpus;
    bool gpu = false;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        if (ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_GPU) {
            devices.push_back(dev);
            gpu = true;
        } else if (ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_IGPU) {
            igpus.push_back(dev);
        }
    }
    if (!gpu && !igpus.empty()) {
        devices.push_back(igpus.front());
    }
    devices.push_back(nullptr);
    return devices;
}

}  // namespace

Model::Model(const std::string & path, int n_gpu_layers, bool repack, bool load_mtp,
             const std::vector<std::string> & rpc, double rpc_timeout_s, bool rpc_head_local)
    : info_(inspect_gguf(path)), rpc_(rpc) {
    llama_model_params params = llama_model_default_params();
    std::vector<ggml_backend_dev_t> devices;
    // the output matrix, or the token embeddings it is tied to (a copy is made for the head), in host memory;
    // llama.cpp counts the head as the last layer and offloads it first otherwise
    const llama_model_tensor_buft_override head_here[] = {
        {"^(output|token_embd)\\.weight$", ggml_backend_cpu_buffer_type()}, {nullptr, nullptr}};
    if (!rpc.empty()) {
        rpc_servers_ = std::make_unique<RpcServers>(rpc, rpc_timeout_s);
        devices = offload_devices(*rpc_servers_);
        params.devices = devices.data();
        if (rpc_head_local) {
            params.tensor_buft_overrides = head_here;
        }
    }
    params.n_gpu_layers = n_gpu_layers;
    params.use_extra_bufts = repack;
    params.load_mtp = load_mtp && info_.has_nextn;
    mtp_loaded_ = params.load_mtp;
    model_.reset(llama_model_load_from_file(path.c_str(), params));
    if (!model_) {
        throw std::invalid_argument("llama.cpp could not load '" + path + "' (architecture '" +
                                    info_.architecture + "'): unsupported, truncated or inconsistent model");
    }
}

int64_t Model::tensor_dim(const std::string & name, int dim) const {
    ggml_context * meta = nullptr;
    gguf_init_params params = { /*no_alloc =*/ true, /*ctx =*/ &meta };
    std::unique_ptr<gguf_context, gguf_deleter> ctx(gguf_init_from_file(info_.path.c_str(), params));
    int64_t value = -1;
    if (ctx && meta) {
        const ggml_tensor * t = ggml_get_tensor(meta, name.c_str());
        if (t != nullptr && dim >= 0 && dim < GGML_MAX_DIMS) {
            value = t->ne[dim];
        }
    }
    if (meta) {
        ggml_free(meta);
    }
    return value;
}

int32_t Model::n_embd_input() const { return (int32_t) model_->hparams.n_embd_inp_enc(); }

uint64_t Model::cache_bytes(int64_t n_ctx, int32_t n_seq, int32_t n_ubatch, uint32_t n_rs_seq) const {
    const llama_hparams & hp = model_->hparams;
    uint64_t bytes = 0;
    for (uint32_t il = 0; il < hp.n_layer(); ++il) {
        if (hp.is_recr(il)) {
            bytes += (uint64_t) (hp.n_embd_r() + hp.n_embd_s()) * sizeof(float) * (1 + n_rs_seq);
        } else {
            const int64_t cells = hp.is_swa(il) && hp.n_swa > 0 ? std::min<int64_t>(n_ctx, hp.n_swa + n_ubatch) : n_ctx;
            bytes += (uint64_t) cells * (hp.n_embd_k_gqa(il) + hp.n_embd_v_gqa(il)) * 2;  // F16
        }
    }
    return bytes * (uint64_t) std::max(1, n_seq);
}

namespace {

uint64_t host_available_bytes() {
    std::ifstream meminfo("/proc/meminfo");
    std::string line;
    while (std::getline(meminfo, line)) {
        if (line.rfind("MemAvailable:", 0) == 0) {
            std::istringstream fields(line.substr(13));
            uint64_t kib = 0;
            fields >> kib;
            return kib * 1024;
        }
    }
    size_t free = 0, total = 0;  // not Linux: ggml's view of the host
    if (ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU)) {
        ggml_backend_dev_memory(cpu, &free, &total);
    }
    return free;
}

}  // namespace

uint64_t Model::free_memory(std::string & where) const {
    for (int i = 0; i < llama_model_n_devices(model_.get()); ++i) {
        ggml_backend_dev_t dev = llama_model_get_device(model_.get(), i);
        const auto type = ggml_backend_dev_type(dev);
        if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) {
            size_t free = 0, total = 0;
            ggml_backend_dev_memory(dev, &free, &total);
            where = std::string("on ") + ggml_backend_dev_name(dev);
            return free;
        }
    }
    where = "in host memory (MemAvailable)";
    return host_available_bytes();
}

std::vector<std::string> Model::devices() const {
    std::vector<std::string> names;
    for (int i = 0; i < llama_model_n_devices(model_.get()); ++i) {
        ggml_backend_dev_t dev = llama_model_get_device(model_.get(), i);
        names.push_back(std::string(ggml_backend_dev_name(dev)) + ": " + ggml_backend_dev_description(dev));
    }
    return names;
}

void ensure_cache_fits(const Model & model, int64_t n_ctx, int32_t n_seq, int32_t n_ubatch, uint32_t n_rs_seq,
                       const Model * draft) {
    const int64_t cells = (n_ctx + 255) / 256 * 256;  // llama.cpp rounds the cache up to 256 cells
    uint64_t need = model.cache_bytes(cells, n_seq, n_ubatch, n_rs_seq);
    if (draft != nullptr) {
        need += draft->cache_bytes(cells, n_seq, n_ubatch, 0);
    }
    // logits of one batch and the activations of a prompt chunk, roughly
    need += (uint64_t) n_ubatch * (model.n_vocab() + 16ull * model.n_embd()) * sizeof(float);
    std::string where;
    const uint64_t free = model.free_memory(where);
    if (free > 0 && need > free) {
        auto mib = [](uint64_t b) { return std::to_string(b >> 20) + " MiB"; };
        throw std::invalid_argument("n_ctx " + std::to_string(n_ctx) +
                                    (n_seq > 1 ? " x " + std::to_string(n_seq) + " sequences" : std::string()) +
                                    " needs about " + mib(need) + " for the KV cache, recurrent state and buffers, "
                                    "but only " + mib(free) + " are free " + where + ": lower n_ctx");
    }
}

bool Model::publishes_layer_features() const {
    for (const char * arch : kLayerFeatureArchs) {
        if (info_.architecture == arch) {
            return true;
        }
    }
    return false;
}

std::string layer_feature_architectures() {
    std::string out;
    for (const char * arch : kLayerFeatureArchs) {
        out += (out.empty() ? "" : ", ") + std::string(arch);
    }
    return out;
}

std::string Model::meta(const std::string & key, const std::string & fallback) const {
    char buf[256] = {};
    if (llama_model_meta_val_str(model_.get(), key.c_str(), buf, sizeof(buf)) < 0) {
        return fallback;
    }
    return buf;
}

std::vector<llama_token> Model::tokenize(const std::string & text, bool add_special) const {
    // a first call with a small buffer returns the negated count needed
    std::vector<llama_token> tokens(text.size() + 8);
    int32_t n = llama_tokenize(vocab(), text.data(), (int32_t) text.size(), tokens.data(),
                               (int32_t) tokens.size(), add_special, /*parse_special=*/ true);
    if (n < 0) {
        tokens.resize(-n);
        n = llama_tokenize(vocab(), text.data(), (int32_t) text.size(), tokens.data(),
                           (int32_t) tokens.size(), add_special, true);
    }
    if (n < 0) {
        throw std::runtime_error("tokenization failed");
    }
    tokens.resize(n);
    return tokens;
}

std::string Model::token_to_piece(llama_token token) const {
    char buf[128];
    int32_t n = llama_token_to_piece(vocab(), token, buf, sizeof(buf), 0, /*special=*/ false);
    if (n >= 0) {
        return std::string(buf, n);
    }
    std::string big(-n, '\0');
    n = llama_token_to_piece(vocab(), token, big.data(), (int32_t) big.size(), 0, false);
    big.resize(n > 0 ? n : 0);
    return big;
}

void check_same_vocab(const Model & target, const Model & draft) {
    const llama_vocab * vt = target.vocab();
    const llama_vocab * vd = draft.vocab();
    const std::string where = " (target '" + target.path() + "', draft '" + draft.path() + "')";

    if (llama_vocab_type(vt) != llama_vocab_type(vd)) {
        throw std::invalid_argument("draft and target use different tokenizer types" + where);
    }
    if (target.n_vocab() != draft.n_vocab()) {
        throw std::invalid_argument("draft vocabulary has " + std::to_string(draft.n_vocab()) +
                                    " tokens, target has " + std::to_string(target.n_vocab()) + where);
    }
    if (llama_vocab_bos(vt) != llama_vocab_bos(vd) || llama_vocab_eos(vt) != llama_vocab_eos(vd) ||
        llama_vocab_get_add_bos(vt) != llama_vocab_get_add_bos(vd)) {
        throw std::invalid_argument("draft and target differ in BOS/EOS tokens" + where);
    }
    for (int32_t i = 0; i < target.n_vocab(); ++i) {
        if (std::strcmp(llama_vocab_get_text(vt, i), llama_vocab_get_text(vd, i)) != 0) {
            throw std::invalid_argument("draft and target vocabularies differ at token " + std::to_string(i) + where);
        }
    }
}

}  // namespace llamaspec
