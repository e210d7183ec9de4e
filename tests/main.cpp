// The doctest runner for the host tests and the GPU tests (compiled by the host compiler).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <iostream>
#include <map>
#include <string>

namespace {

/// Says why cases were skipped: a case that cannot run here (no GPU, a world it does not fit) is
/// skipped by a decorator decided when it registers (tests/gpu/gpu_support.hpp: doctest 2.4 cannot
/// skip a case once it runs), which names the reason as the case's description. doctest counts
/// such cases among "skipped" in its summary but does not say why; this prints, before the
/// summary, one line per reason with the number of cases it skipped, on stderr (where it cannot
/// break a reporter's XML on stdout). A case left out by a filter such as -tc is counted here too
/// where it carries a skip decorator, as doctest counts it among "skipped".
struct skip_reasons : doctest::IReporter {
  const doctest::ContextOptions& opt;
  std::map<std::string, int> reasons;

  explicit skip_reasons(const doctest::ContextOptions& o) : opt(o) {}

  void test_case_skipped(const doctest::TestCaseData& tc) override {
    if (tc.m_skip && !opt.no_skip)
      ++reasons[tc.m_description && *tc.m_description ? tc.m_description : "(no reason given)"];
  }
  void test_run_end(const doctest::TestRunStats&) override {
    opt.cout->flush(); // in a log of both streams, these lines come after the cases' output
    for (const auto& [why, n] : reasons)
      std::cerr << "[ark] skipped " << n << (n == 1 ? " test case: " : " test cases: ") << why << "\n";
  }

  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
};

} // namespace

DOCTEST_REGISTER_LISTENER("skip_reasons", 1, skip_reasons);
