// How analyse_tables (analyse_tables.cpp) spreads its work over two threads: two first pieces,
// one on each, then a list of pieces whose next entry whichever thread is free takes.
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <future>
#include <system_error>
#include <thread>
#include <vector>

#include "../core/thread_start.h"

namespace gpuprof {

// One table's work: it reads the Trace and what the first pieces it `needs` made, and writes only
// its own results (no two pieces write the same thing).
struct TablePiece {
  static constexpr int kSteps = 1;   // the breakdown (first piece 0)
  static constexpr int kLinks = 2;   // the launch links and what comes with them (first piece 1)
  int needs = 0;
  std::function<void()> run;
};

// Runs `first[0]` on this thread and `first[1]` on a second one, then `tables` on both: each thread
// takes the next piece, waiting for the first pieces it needs. After an error no piece starts;
// both threads have stopped before the first error is rethrown: the first pieces' (breakdown, then
// links), then the tables' in the list's order. Where no thread can be started, all on this one.
inline void run_pieces(const std::function<void()> (&first)[2], const std::vector<TablePiece>& tables) {
  std::exception_ptr first_error[2];
  std::vector<std::exception_ptr> errors(tables.size());
  std::atomic<bool> failed{false};
  std::atomic<size_t> next{0};
  std::promise<void> finished[2];   // set once the first piece ended, well or not
  const std::shared_future<void> ready[2] = {finished[0].get_future().share(), finished[1].get_future().share()};
  const auto run_first = [&](int k) {
    try {
      first[k]();
    } catch (...) {
      first_error[k] = std::current_exception();
      failed = true;
    }
    finished[k].set_value();
  };
  const auto take_tables = [&] {
    for (size_t i = next++; i < tables.size() && !failed; i = next++) {
      const TablePiece& piece = tables[i];
      if (piece.needs & TablePiece::kSteps) ready[0].wait();
      if (piece.needs & TablePiece::kLinks) ready[1].wait();
      if (failed) break;
      try {
        piece.run();
      } catch (...) {
        errors[i] = std::current_exception();
        failed = true;
      }
    }
  };
  std::thread other;
  try {
    other = std::thread([&] {
      prepare_thread_for_exceptions();
      run_first(1);
      take_tables();
    });
  } catch (const std::system_error&) {
    // no thread to be had: this one does it all
  }
  run_first(0);
  if (!other.joinable()) run_first(1);
  take_tables();
  if (other.joinable()) other.join();
  for (const std::exception_ptr& e : first_error)
    if (e) std::rethrow_exception(e);
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace gpuprof
