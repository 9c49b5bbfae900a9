#include "cli/help_format.h"

#include <sstream>

namespace moeprof::cli {

namespace {

constexpr size_t kWidth = 100;

// The value name: the type name given with ->type_name(), or an IsMember validator's choices.
std::string value_name(const CLI::Option* opt) {
  const std::string full = opt->get_type_name();  // "TEXT:{a,b}" or "INT:INT in [1 - 9]" or "N"
  std::string base = full.substr(0, full.find(':'));
  size_t brace = full.find(":{");
  if (brace != std::string::npos) {
    std::string choices = full.substr(brace + 2);
    choices = choices.substr(0, choices.find('}'));
    for (char& c : choices)
      if (c == ',') c = '|';
    return choices;
  }
  if (base == "TEXT") return "TEXT";
  if (base == "INT" || base == "UINT" || base == "FLOAT") return base == "FLOAT" ? "X" : "N";
  return base;
}

std::string wrap(const std::string& text, size_t first_col) {
  std::istringstream words(text);
  std::string word, out, line;
  const size_t room = kWidth > first_col + 20 ? kWidth - first_col : 40;
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > room) {
      out += line + "\n" + std::string(first_col, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  out += line;
  for (char& c : out)
    if (c == '\x01') c = ' ';
  return out;
}

}  // namespace

std::string HelpFormatter::make_option_name(const CLI::Option* opt, bool is_positional) const {
  // Every name, without CLI11's "{false}" default-value marks of flags such as !--no-cupti.
  std::string n = is_positional ? opt->get_name(true, false) : opt->get_name(false, true), out;
  bool skip = false;
  for (char c : n) {
    if (c == '{') skip = true;
    if (!skip) out.push_back(c);
    if (c == '}') skip = false;
  }
  return out;
}

std::string HelpFormatter::make_option_opts(const CLI::Option* opt) const {
  if (opt->get_type_size() == 0 || opt->get_expected_max() == 0) return "";  // a flag
  std::string v = value_name(opt);
  if (opt->get_expected_min() == 0) return " [" + v + "]";
  if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) return " " + v + " ...";
  return " " + v;
}

std::string HelpFormatter::make_option_desc(const CLI::Option* opt) const {
  std::string d = opt->get_description();
  // "[default: X]" is kept on one line when wrapped (\x01 stands for its space).
  if (opt->get_type_size() != 0 && opt->get_expected_max() != 0 && !opt->get_default_str().empty())
    d += " [default:\x01" + opt->get_default_str() + "]";
  if (opt->get_required() && opt->nonpositional()) d += " (required)";
  return d;
}

std::string HelpFormatter::make_option_usage(const CLI::Option* opt) const {
  std::string name = opt->get_name(true, false);
  if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) name += "...";
  return opt->get_required() ? name : "[" + name + "]";
}

std::string HelpFormatter::make_option(const CLI::Option* opt, bool is_positional) const {
  std::string left = "  " + make_option_name(opt, is_positional) + make_option_opts(opt);
  const std::string desc = make_option_desc(opt);
  const size_t col = get_column_width();
  std::string out = left;
  if (left.size() + 1 > col) out += "\n" + std::string(col, ' ');
  else out += std::string(col - left.size(), ' ');
  return out + wrap(desc, col) + "\n";
}

}  // namespace moeprof::cli
