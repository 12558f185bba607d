// ferrite.hpp: a C++17 RAII wrapper over ferrite.h (header only).
//
// Every handle frees itself (store closes and frees, snapshot, cursor);
// errors are thrown as ferrite::error carrying the FERRITE_ERR_* code and
// the library's message; absent keys are std::nullopt / false, not errors.
// Thread safety is the C API's: a store may be shared by threads, a cursor
// is one thread's.
#ifndef FERRITE_HPP
#define FERRITE_HPP

#include <ferrite.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferrite {

// A failed call: code() is the FERRITE_ERR_* code, what() the message.
class error : public std::runtime_error {
public:
    error(int code, const std::string &what) : std::runtime_error(what), code_(code) {}
    int code() const noexcept { return code_; }

private:
    int code_;
};

namespace detail {
inline int check(int rc, const char *what) {
    if (rc < 0) throw error(rc, std::string(what) + ": " + ferrite_last_error());
    return rc;
}
// Takes ownership of a malloc'd value from the library.
inline std::string take(void *p, size_t n) {
    std::string s(static_cast<const char *>(p), n);
    ferrite_free(p);
    return s;
}
}  // namespace detail

// One write of store::batch.
struct op {
    bool put;
    std::string key;
    std::string value;
    static op set(std::string k, std::string v) { return {true, std::move(k), std::move(v)}; }
    static op erase(std::string k) { return {false, std::move(k), {}}; }
};

// A scan in progress: next() until it returns false. The views it
// returns are valid until the next call.
class cursor {
public:
    explicit cursor(ferrite_iter *it) noexcept : it_(it) {}
    cursor(cursor &&o) noexcept : it_(std::exchange(o.it_, nullptr)) {}
    cursor &operator=(cursor &&o) noexcept {
        std::swap(it_, o.it_);
        return *this;
    }
    cursor(const cursor &) = delete;
    cursor &operator=(const cursor &) = delete;
    ~cursor() { ferrite_iter_free(it_); }

    bool next(std::string_view &key, std::string_view &value) {
        const void *k, *v;
        size_t kl, vl;
        int rc = detail::check(ferrite_iter_next(it_, &k, &kl, &v, &vl), "ferrite_iter_next");
        if (rc == FERRITE_END) return false;
        key = std::string_view(static_cast<const char *>(k), kl);
        value = std::string_view(static_cast<const char *>(v), vl);
        return true;
    }

    // The rest of the scan, copied.
    std::vector<std::pair<std::string, std::string>> collect() {
        std::vector<std::pair<std::string, std::string>> out;
        std::string_view k, v;
        while (next(k, v)) out.emplace_back(k, v);
        return out;
    }

private:
    ferrite_iter *it_;
};

// Bounds of a scan: start inclusive, end exclusive (unless end_inclusive).
struct range {
    std::optional<std::string> start, end;
    bool reverse = false, end_inclusive = false, prefix = false;
    static range all() { return {}; }
    static range between(std::string s, std::string e) { return {std::move(s), std::move(e)}; }
    static range with_prefix(std::string p) { return {std::move(p), std::nullopt, false, false, true}; }
    range rev() const {
        range r = *this;
        r.reverse = !r.reverse;
        return r;
    }
    int flags() const {
        return (reverse ? FERRITE_SCAN_REVERSE : 0) | (end_inclusive ? FERRITE_SCAN_END_INCLUSIVE : 0) |
               (prefix ? FERRITE_SCAN_PREFIX : 0);
    }
};

// A consistent read-only view (see ferrite_store_snapshot for how each
// engine's writers behave while it lives).
class snapshot {
public:
    explicit snapshot(ferrite_snapshot *s) noexcept : s_(s) {}
    snapshot(snapshot &&o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    snapshot &operator=(snapshot &&o) noexcept {
        std::swap(s_, o.s_);
        return *this;
    }
    snapshot(const snapshot &) = delete;
    snapshot &operator=(const snapshot &) = delete;
    ~snapshot() { ferrite_snapshot_free(s_); }

    std::optional<std::string> get(std::string_view key) const {
        void *v = nullptr;
        size_t n = 0;
        int rc = detail::check(ferrite_snapshot_get(s_, key.data(), key.size(), &v, &n), "ferrite_snapshot_get");
        if (rc == FERRITE_NOT_FOUND) return std::nullopt;
        return detail::take(v, n);
    }
    uint64_t size() const {
        uint64_t n = 0;
        detail::check(ferrite_snapshot_len(s_, &n), "ferrite_snapshot_len");
        return n;
    }
    cursor scan(const range &r = range::all()) const {
        ferrite_iter *it = nullptr;
        detail::check(ferrite_snapshot_scan(s_, r.start ? r.start->data() : nullptr, r.start ? r.start->size() : 0,
                                            r.end ? r.end->data() : nullptr, r.end ? r.end->size() : 0, r.flags(), &it),
                      "ferrite_snapshot_scan");
        return cursor(it);
    }

private:
    ferrite_snapshot *s_;
};

// An open store; closed and freed by the destructor (close() to see the
// close's error).
class store {
public:
    explicit store(const std::string &path, const std::string &options = "") {
        detail::check(ferrite_store_open(path.c_str(), options.empty() ? nullptr : options.c_str(), &s_),
                      "ferrite_store_open");
    }
    store(store &&o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    store &operator=(store &&o) noexcept {
        std::swap(s_, o.s_);
        return *this;
    }
    store(const store &) = delete;
    store &operator=(const store &) = delete;
    ~store() { ferrite_store_free(s_); }

    void put(std::string_view key, std::string_view value) {
        detail::check(ferrite_store_put(s_, key.data(), key.size(), value.data(), value.size()), "ferrite_store_put");
    }
    std::optional<std::string> get(std::string_view key) const {
        void *v = nullptr;
        size_t n = 0;
        int rc = detail::check(ferrite_store_get(s_, key.data(), key.size(), &v, &n), "ferrite_store_get");
        if (rc == FERRITE_NOT_FOUND) return std::nullopt;
        return detail::take(v, n);
    }
    // True when the key was there.
    bool erase(std::string_view key) {
        return detail::check(ferrite_store_delete(s_, key.data(), key.size()), "ferrite_store_delete") == FERRITE_OK;
    }
    // All or nothing.
    void batch(const std::vector<op> &ops) {
        std::vector<ferrite_op> raw;
        raw.reserve(ops.size());
        for (const op &o : ops)
            raw.push_back({o.put ? FERRITE_OP_PUT : FERRITE_OP_DELETE, o.key.data(), o.key.size(), o.value.data(),
                           o.value.size()});
        detail::check(ferrite_store_batch(s_, raw.data(), raw.size()), "ferrite_store_batch");
    }
    uint64_t size() const {
        uint64_t n = 0;
        detail::check(ferrite_store_len(s_, &n), "ferrite_store_len");
        return n;
    }
    cursor scan(const range &r = range::all()) const {
        ferrite_iter *it = nullptr;
        detail::check(ferrite_store_scan(s_, r.start ? r.start->data() : nullptr, r.start ? r.start->size() : 0,
                                         r.end ? r.end->data() : nullptr, r.end ? r.end->size() : 0, r.flags(), &it),
                      "ferrite_store_scan");
        return cursor(it);
    }
    ferrite::snapshot snapshot() const {
        ferrite_snapshot *s = nullptr;
        detail::check(ferrite_store_snapshot(s_, &s), "ferrite_store_snapshot");
        return ferrite::snapshot(s);
    }
    // Closes now (later calls throw FERRITE_ERR_CLOSED); the destructor frees.
    void close() { detail::check(ferrite_store_close(s_), "ferrite_store_close"); }
    ferrite_store *raw() const noexcept { return s_; }

private:
    ferrite_store *s_ = nullptr;
};

// The deep check of a pool file: the number of findings and the report.
struct check_result {
    size_t findings;
    std::string report;
    bool clean() const noexcept { return findings == 0; }
};

inline check_result check(const std::string &path) {
    char *report = nullptr;
    size_t n = 0;
    detail::check(ferrite_pool_check(path.c_str(), &report, &n), "ferrite_pool_check");
    std::string text(report ? report : "");
    ferrite_free(report);
    return {n, text};
}

}  // namespace ferrite

#endif  // FERRITE_HPP
