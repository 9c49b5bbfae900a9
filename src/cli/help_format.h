// The help of every subcommand in one form: each option with a short value name (N, FILE, DIR, or
// its choices a|b|c) instead of CLI11's raw validators, its default when it has one, and
// descriptions wrapped at 100 columns. docs/cli.md holds this text verbatim (a test compares).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace moeprof::cli {

class HelpFormatter : public CLI::Formatter {
 public:
  HelpFormatter() { column_width(32); }
  std::string make_option(const CLI::Option* opt, bool is_positional) const override;
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override;
  std::string make_option_opts(const CLI::Option* opt) const override;
  std::string make_option_desc(const CLI::Option* opt) const override;
  std::string make_option_usage(const CLI::Option* opt) const override;
};

}  // namespace moeprof::cli
