// deltaserve bandwidth: the machine's memory read bandwidth, with 1 thread and with N.
#include <spdlog/spdlog.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/bandwidth.h"

namespace ds::cli {
namespace {

RegisterCommand reg("bandwidth", [](CLI::App& app, int&) {
  auto* cmd = app.add_subcommand("bandwidth", "measure memory read bandwidth (GB/s)");
  auto mb = std::make_shared<int>(512);
  auto threads = std::make_shared<int>(0);
  cmd->add_option("--mb", *mb, "buffer size in MiB")->check(CLI::Range(16, 16384));
  cmd->add_option("--threads", *threads, "0 = all cores")->check(CLI::NonNegativeNumber);
  cmd->callback([=] {
    const int n = *threads > 0 ? *threads : default_thread_count();
    const size_t bytes = size_t(*mb) << 20;
    const double one = measure_read_bandwidth(bytes, 5, nullptr);
    ThreadPool pool(n);
    const double all = measure_read_bandwidth(bytes, 5, &pool);
    nlohmann::json j{{"read_gb_per_s_1_thread", one}, {"read_gb_per_s", all}, {"threads", n},
                     {"isa", isa_name(active_isa())}, {"buffer_mib", *mb}};
    std::cout << j.dump() << "\n";
  });
});

}  // namespace
}  // namespace ds::cli
