// External correlation bookkeeping, on the CPU: plain functions in CUPTI's push/pop slots count
// what would reach CUPTI. The one process-wide instance is used (the fork handler acts on it).
#ifdef GPUPROF_HAVE_CUPTI

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "cupti_correlation.h"

using gpuprof::collect::cupti::Correlation;

namespace {
std::atomic<int> g_pushes{0}, g_pops{0};
CUptiResult count_push(CUpti_ExternalCorrelationKind, uint64_t) {
  g_pushes.fetch_add(1);
  return CUPTI_SUCCESS;
}
CUptiResult count_pop(CUpti_ExternalCorrelationKind, uint64_t*) {
  g_pops.fetch_add(1);
  return CUPTI_SUCCESS;
}
CUptiResult refuse_push(CUpti_ExternalCorrelationKind, uint64_t) { return CUPTI_ERROR_INVALID_OPERATION; }

// Back to off with nothing outstanding, whatever a test left.
void reset(Correlation& c) {
  c.end();
  while (c.outstanding() > 0) c.pop();
  g_pushes = 0;
  g_pops = 0;
}
}  // namespace

TEST(CuptiCorrelation, AnExitPopsExactlyWhenItsEnterPushedWhateverCollectionDidBetween) {
  Correlation& c = Correlation::instance();
  reset(c);
  c.push(1);                    // off: nothing pushed
  c.begin(count_push, count_pop);
  c.push(2);                    // on: pushed
  c.push(3);
  c.end();                      // collection stops with two ids outstanding
  c.push(4);                    // off, but outstanding ids keep the slow path: not pushed
  c.pop();                      // exit of 4: pushed nothing, pops nothing
  c.pop();                      // exit of 3
  c.pop();                      // exit of 2
  c.pop();                      // exit of 1: pushed nothing
  EXPECT_EQ(g_pushes.load(), 2);
  EXPECT_EQ(g_pops.load(), 2);
  EXPECT_EQ(c.outstanding(), 0);
}

TEST(CuptiCorrelation, ARefusedPushIsReportedAndNeverPopped) {
  Correlation& c = Correlation::instance();
  reset(c);
  c.begin(refuse_push, count_pop);
  EXPECT_EQ(c.push(7), CUPTI_ERROR_INVALID_OPERATION);
  EXPECT_EQ(c.pop(), CUPTI_SUCCESS);
  EXPECT_EQ(g_pops.load(), 0);
  EXPECT_EQ(c.outstanding(), 0);
  c.end();
}

TEST(CuptiCorrelation, EveryPushingThreadIsMappedToItsOsThreadId) {
  Correlation& c = Correlation::instance();
  reset(c);
  c.begin(count_push, count_pop);
  const size_t before = c.threads().size();
  std::thread t([&] {
    c.push(11);
    c.pop();
  });
  t.join();
  c.end();
  EXPECT_EQ(c.threads().size(), before + 1);
}

// A DataLoader worker is a fork of a process whose session is on, with host ops open: the child
// has no CUPTI subscription, so it must neither push (new ops) nor pop (exits of ops entered before
// the fork). The child reports through its exit status.
TEST(CuptiCorrelation, AForkedChildHasCollectionOffAndNothingToPop) {
  Correlation& c = Correlation::instance();
  reset(c);
  c.begin(count_push, count_pop);
  c.push(21);   // an op open across the fork
  ASSERT_EQ(g_pushes.load(), 1);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int bad = 0;
    if (c.on()) bad |= 1;
    if (c.outstanding() != 0) bad |= 2;
    c.push(22);
    c.pop();      // the child's exit of 22
    c.pop();      // and of 21, entered in the parent
    if (g_pushes.load() != 1 || g_pops.load() != 0) bad |= 4;
    (void)c.threads();   // the thread map's lock is usable
    ::_exit(bad);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: still on, 2: ids outstanding, 4: called CUPTI";
  // The parent is untouched: still on, and its open op pops.
  EXPECT_TRUE(c.on());
  c.pop();
  EXPECT_EQ(g_pops.load(), 1);
  reset(c);
}

#endif  // GPUPROF_HAVE_CUPTI
