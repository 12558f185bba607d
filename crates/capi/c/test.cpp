// Tests of ferrite.hpp: RAII, exceptions with codes, scans, snapshots, batch.
// Usage: test_cpp DIR. Exit 0 when every check passes.
#include <ferrite.hpp>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

static int passed, failed;
#define CHECK(cond)                                                                                  \
    do {                                                                                             \
        if (cond) {                                                                                  \
            passed++;                                                                                \
        } else {                                                                                     \
            failed++;                                                                                \
            std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK failed: " #cond << std::endl;       \
        }                                                                                            \
    } while (0)

template <class F>
static int code_of(F f) {
    try {
        f();
    } catch (const ferrite::error &e) {
        return e.code();
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    std::string dir = argv[1];
    for (const char *engine : {"inp", "cow", "lsm"}) {
        std::string path = dir + "/cpp-" + engine + ".pool";
        std::remove(path.c_str());
        {
            ferrite::store s(path, std::string("size=16M,engine=") + engine);
            s.put("apple", "red");
            s.put(std::string_view("nul\0key", 7), std::string_view("a\0b", 3));
            CHECK(s.get("apple") == std::optional<std::string>("red"));
            CHECK(s.get(std::string_view("nul\0key", 7))->size() == 3);
            CHECK(!s.get("pear").has_value());
            s.batch({ferrite::op::set("kiwi", "green"), ferrite::op::set("plum", "purple"), ferrite::op::erase("apple")});
            CHECK(!s.get("apple") && s.get("kiwi") == std::optional<std::string>("green"));
            CHECK(s.size() == 3);
            CHECK(!s.erase("apple") && s.erase("plum"));
            s.put("plum", "purple");

            // Threads share a store.
            std::thread t([&] {
                for (int i = 0; i < 50; i++) s.put("t" + std::to_string(i), std::to_string(i));
            });
            for (int i = 0; i < 50; i++) s.put("m" + std::to_string(i), std::to_string(i));
            t.join();
            CHECK(s.size() == 103);

            auto rows = s.scan(ferrite::range::between("k", "p")).collect();
            CHECK(rows.size() == 52 && rows[0].first == "kiwi" && rows[1].first == "m0" && rows[51].first.size() == 7);  // kiwi, m0..m49, nul\0key
            auto rev = s.scan(ferrite::range::with_prefix("t").rev()).collect();
            CHECK(rev.size() == 50 && rev[0].first == "t9" && rev[49].first == "t0");

            {
                auto snap = s.snapshot();
                if (std::strcmp(engine, "cow") == 0) {  // CoW's writers go on
                    s.put("kiwi", "brown");
                } else {  // InP's and LSM's would wait: refused while it lives
                    CHECK(code_of([&] { s.put("kiwi", "brown"); }) == FERRITE_ERR_BUSY);
                }
                CHECK(snap.get("kiwi") == std::optional<std::string>("green"));
                CHECK(snap.size() == 103);
                CHECK(snap.scan(ferrite::range::with_prefix("kiwi")).collect().at(0).second == "green");
            }
            s.put("kiwi", "brown");  // the snapshot is gone: writes go through
            CHECK(s.get("kiwi") == std::optional<std::string>("brown"));
            CHECK(code_of([&] { s.put("", "x"); }) == FERRITE_ERR_KEY_SIZE);
            CHECK(code_of([&] { s.put(std::string(2000, 'k'), "x"); }) == FERRITE_ERR_KEY_SIZE);
            CHECK(code_of([&] { ferrite::store again(path); }) == FERRITE_ERR_BUSY);
            s.close();
            CHECK(code_of([&] { s.get("kiwi"); }) == FERRITE_ERR_CLOSED);
            // Moved-from and closed handles free cleanly at scope end.
            ferrite::store moved = std::move(s);
            CHECK(code_of([&] { moved.put("a", "b"); }) == FERRITE_ERR_CLOSED);
        }
        auto c = ferrite::check(path);
        CHECK(c.clean());
        if (!c.clean()) std::cerr << c.report;
        ferrite::store s(path, "create=no");
        CHECK(s.size() == 103);
    }
    CHECK(code_of([&] { ferrite::store s(dir + "/nowhere/x.pool", "create=no"); }) < 0);
    CHECK(code_of([&] { ferrite::store s(dir + "/y.pool", "engine=nope"); }) == FERRITE_ERR_INVALID);
    std::cout << "c++ api: " << passed << " passed, " << failed << " failed" << std::endl;
    return failed == 0 ? 0 : 1;
}
