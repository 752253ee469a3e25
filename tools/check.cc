#include "commands.h"
namespace dcpmla::tool {
Runner add_check(CLI::App&) { return [] { return 0; }; }
}
