#include "common/listener_policy.h"

namespace lossd {

Result<ListenerAuth> DecideListenerAuth(const ListenAddress& addr, const ListenerChoice& c,
                                        const ListenerFlagNames& n) {
  const std::string where = addr.ToString();
  const std::string mtls = n.tls_cert + " and " + n.tls_key + " with " + n.client_ca;
  if (c.client_ca && !c.tls)
    return InvalidArgument(n.client_ca + " needs " + n.tls_cert + " and " + n.tls_key);
  if (c.tls_no_client_auth && !c.tls)
    return InvalidArgument(n.no_client_auth + " needs " + n.tls_cert + " and " + n.tls_key);
  if (c.tls_no_client_auth && c.client_ca)
    return InvalidArgument(n.no_client_auth + " contradicts " + n.client_ca + ": give one (" +
                           n.client_ca + " requires client certificates)");
  if (c.tls && (c.plaintext_loopback || c.insecure_tcp))
    return InvalidArgument((c.plaintext_loopback ? n.plaintext_loopback : n.insecure_tcp) +
                           " asks for plaintext, but " + n.tls_cert + " asks for TLS: give one");
  if (c.plaintext_loopback && c.insecure_tcp)
    return InvalidArgument(n.plaintext_loopback + " and " + n.insecure_tcp +
                           " contradict each other: " + n.plaintext_loopback +
                           " is for a loopback " + n.listen + ", " + n.insecure_tcp +
                           " for any other address");

  if (c.tls) {
    if (c.client_ca) return ListenerAuth::kMutualTls;
    if (c.tls_no_client_auth) return ListenerAuth::kTls;
    return InvalidArgument("refusing " + n.what + " over TLS without client certificates on " +
                           where + ": anyone who reaches it could change rules; give " +
                           n.client_ca + " CA.pem (mutual TLS), or say " + n.no_client_auth);
  }
  if (addr.loopback) {
    if (c.plaintext_loopback) return ListenerAuth::kPlaintext;
    if (c.insecure_tcp)
      return InvalidArgument(n.insecure_tcp + " is for a non-loopback address; " + where +
                             " is loopback: say " + n.plaintext_loopback);
    return InvalidArgument("refusing plaintext " + n.what + " on " + where +
                           ": every local user and container sharing this network namespace "
                           "could change rules (the Unix socket is 0660); give " +
                           mtls + ", or say " + n.plaintext_loopback);
  }
  if (c.insecure_tcp) return ListenerAuth::kPlaintext;
  if (c.plaintext_loopback)
    return InvalidArgument(n.plaintext_loopback + " is for a loopback address; " + where +
                           " is not: give " + mtls + ", or force plaintext with " + n.insecure_tcp);
  return InvalidArgument("refusing plaintext " + n.what + " on " + where + ": give " + mtls +
                         ", listen on loopback with " + n.plaintext_loopback +
                         ", or force it with " + n.insecure_tcp);
}

}  // namespace lossd
