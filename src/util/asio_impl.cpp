// The one translation unit that compiles Asio's and Beast's implementation (BOOST_*_SEPARATE_COMPILATION),
// so the rest of the project only parses their headers.
#include <boost/asio/impl/src.hpp>
#include <boost/beast/src.hpp>
