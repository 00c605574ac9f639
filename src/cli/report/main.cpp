// sigma-report: (re)writes a sigmarun job's report.html and the summary in
// its report.json, and prints the summary. sigmarun does the same at the
// end of every job; this is for a job folder copied elsewhere, or to draw
// another reference run beside it.
//
//   sigma-report JOB_DIR [--reference FAULT_FREE_JOB_DIR] [--compare LABEL=JOB_DIR ...]
#include "report/figures.hpp"

#include <CLI/CLI.hpp>

#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"sigma-report: a sigmarun job's report.html and summary"};
  std::string job, reference;
  app.add_option("job_dir", job, "the job folder sigmarun wrote")->required()->check(CLI::ExistingDirectory);
  app.add_option("--reference", reference, "a fault-free run's job folder, for the loss chart")
      ->check(CLI::ExistingDirectory);
  std::vector<std::string> compare;
  app.add_option("--compare", compare, "LABEL=JOB_DIR: another run's loss beside this one's (repeatable)")
      ->allow_extra_args(false);
  CLI11_PARSE(app, argc, argv);
  try {
    std::vector<std::pair<std::string, std::string>> others;
    for (const auto& c : compare) others.push_back(sigma_report::parse_compare(c));
    std::cout << sigma_report::write_report(job, reference, others) << "report: " << job << "/report.html\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "sigma-report: " << e.what() << "\n";
    return 1;
  }
}
