#include "net/listener.h"

#include <sys/socket.h>

#include <boost/asio/socket_base.hpp>
#include <boost/system/system_error.hpp>
#include <charconv>

namespace prefixgate::net {

bool splitHostPort(std::string_view text, std::string& host, uint16_t& port) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon + 1 >= text.size()) return false;
  std::string_view h = text.substr(0, colon);
  std::string_view p = text.substr(colon + 1);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) return false;
  unsigned value = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
  if (ec != std::errc() || end != p.data() + p.size() || value > 65535) return false;
  host.assign(h);
  port = static_cast<uint16_t>(value);
  return true;
}

bool listenAddress(const std::string& host, boost::asio::ip::address& address) {
  boost::system::error_code ec;
  address = boost::asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  return !ec;
}

void openAcceptor(boost::asio::ip::tcp::acceptor& acceptor, const std::string& host, uint16_t port,
                  bool reuse_port) {
  namespace asio = boost::asio;
  boost::system::error_code ec;
  asio::ip::address address;
  if (!listenAddress(host, address))
    throw boost::system::system_error(asio::error::invalid_argument, "invalid listen address '" + host + "'");
  asio::ip::tcp::endpoint endpoint(address, port);
  acceptor.open(endpoint.protocol());
  acceptor.set_option(asio::socket_base::reuse_address(true));
  if (reuse_port) {
    int one = 1;
    if (::setsockopt(acceptor.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0)
      throw boost::system::system_error(errno, boost::system::system_category(), "SO_REUSEPORT");
  }
  acceptor.bind(endpoint, ec);
  if (ec) throw boost::system::system_error(ec, "cannot listen on " + host + ":" + std::to_string(port));
  acceptor.listen(asio::socket_base::max_listen_connections);
}

}  // namespace prefixgate::net
