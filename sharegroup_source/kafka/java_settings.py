"""Kafka's Java client settings, which librdkafka does not read: refused in ``kafka.*`` options, translated from
the properties files Kafka's own tools take.

The source's Kafka client is librdkafka, not the Java client. A user who copies ``sasl.jaas.config`` or a JKS
store from a Java application into ``kafka.*`` options gets an OptionError naming what librdkafka takes
instead; values are never printed, since most of these carry secrets. The CLI's ``--command-config`` is a
Java properties file, as Kafka's own tools take it: there the Java settings are translated to
librdkafka's (JAAS login lines, PEM and PKCS#12 stores), and what has no equivalent is refused, naming the
file's setting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sharegroup_source.errors import OptionError
from sharegroup_source.kafka.settings import check_kafka_settings

__all__ = ["refuse_java_settings", "translate_java_settings", "unescape_java"]

#: Java client settings, and what librdkafka takes instead.
_JAVA_ONLY = {
    "sasl.jaas.config": "librdkafka takes credentials as settings: kafka.sasl.username and kafka.sasl.password "
                        "(kafka.sasl.mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512), or for OAUTHBEARER "
                        "kafka.sasl.oauthbearer.method=oidc with kafka.sasl.oauthbearer.client.id, "
                        "kafka.sasl.oauthbearer.client.secret and kafka.sasl.oauthbearer.token.endpoint.url",
    "ssl.truststore.location": "librdkafka reads CA certificates from a PEM file: kafka.ssl.ca.location "
                               "(keytool -exportcert -rfc turns a JKS entry into PEM)",
    "ssl.truststore.password": "a PEM CA file (kafka.ssl.ca.location) needs no password",
    "ssl.truststore.type": "librdkafka reads CA certificates from a PEM file: kafka.ssl.ca.location",
    "ssl.keystore.type": "librdkafka reads a PKCS#12 keystore (kafka.ssl.keystore.location and "
                         "kafka.ssl.keystore.password) or PEM files (kafka.ssl.certificate.location, "
                         "kafka.ssl.key.location, kafka.ssl.key.password)",
    "sasl.login.callback.handler.class": "for OAUTHBEARER use kafka.sasl.oauthbearer.method=oidc with "
                                         "kafka.sasl.oauthbearer.client.id, kafka.sasl.oauthbearer.client.secret "
                                         "and kafka.sasl.oauthbearer.token.endpoint.url",
    "sasl.client.callback.handler.class": "librdkafka has no callback classes; see kafka.sasl.oauthbearer.*",
    "key.deserializer": "the source returns key and value as binary columns: cast or parse them in Spark",
    "value.deserializer": "the source returns key and value as binary columns: cast or parse them in Spark",
}
_JKS_KEYSTORE = "a JKS keystore: " + _JAVA_ONLY["ssl.keystore.type"]

# -- translating a properties file's settings ---------------------------------------------------------------------
_PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_KERBEROS = "com.sun.security.auth.module.Krb5LoginModule"
#: Per login module, each option of sasl.jaas.config and the librdkafka setting it becomes (None: none needed).
_JAAS_OPTIONS: dict[str, dict[str, str | None]] = {
    _PLAIN: {"username": "sasl.username", "password": "sasl.password"},
    _SCRAM: {"username": "sasl.username", "password": "sasl.password"},
    _OAUTH: {"clientId": "sasl.oauthbearer.client.id", "clientSecret": "sasl.oauthbearer.client.secret",
             "scope": "sasl.oauthbearer.scope"},
    _KERBEROS: {"keyTab": "sasl.kerberos.keytab", "principal": "sasl.kerberos.principal",
                "serviceName": "sasl.kerberos.service.name", "useKeyTab": None, "storeKey": None,
                "doNotPrompt": None},
}
_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?:required|requisite|sufficient|optional)\b(?P<options>.*?);?\s*$",
                   re.S)
_JAAS_OPTION = re.compile(r'\s*(?P<name>\w+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s";]+))', re.S)
#: Java's backslash escapes: \uXXXX, or one character (\t, \n, \r, \f; any other stands for itself).
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.S)
_ESCAPED = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def refuse_java_settings(kafka: Mapping[str, str]) -> None:
    """OptionError for the first Java-client setting among ``kafka`` (prefix removed), naming what
    librdkafka takes instead. Values are never printed: most of these carry secrets."""
    for key, value in kafka.items():
        lowered = key.lower()
        instead = _JAVA_ONLY.get(lowered)
        if instead is None and lowered == "ssl.keystore.location" and str(value).lower().endswith(".jks"):
            instead = _JKS_KEYSTORE
        if instead is not None:
            raise OptionError(f"option 'kafka.{key}' is a Java Kafka client setting; the source's Kafka client "
                              f"is librdkafka, which does not read it: {instead}")


def translate_java_settings(settings: Mapping[str, str], where: str = "the client settings") -> dict[str, str]:
    """Kafka Java client settings as librdkafka takes them; librdkafka's own names pass unchanged.

    ``sasl.jaas.config`` becomes ``sasl.username`` / ``sasl.password`` (PLAIN, SCRAM), the
    OAUTHBEARER OIDC client settings or the Kerberos keytab and principal; a PEM truststore
    ``ssl.ca.location``; a PKCS#12 keystore keeps its names, a PEM one becomes certificate and
    key locations; an empty ``ssl.endpoint.identification.algorithm`` becomes ``none``. Anything
    librdkafka cannot take (JKS stores, other login modules, unknown settings) is an OptionError
    naming ``where`` and the setting; the result is checked by building a client, without connecting.
    """
    rest = dict(settings)
    out: dict[str, str] = {}
    jaas = rest.pop("sasl.jaas.config", None)
    if jaas is not None:
        module = _translate_jaas(jaas, out, where)
        if module == _OAUTH:
            out["sasl.oauthbearer.method"] = "oidc"
            rest.pop("sasl.login.callback.handler.class", None)  # Java's OIDC handler: librdkafka's oidc method
    origins = dict.fromkeys(out, "sasl.jaas.config")  # librdkafka's setting -> the file's, for messages
    translated = set(out)
    _translate_stores(rest, out, where)
    origins.update({key: "ssl.truststore.location" if key == "ssl.ca.location" else "ssl.keystore.location"
                    for key in set(out) - translated if key.endswith(".location")})
    if rest.get("ssl.endpoint.identification.algorithm") == "":
        rest["ssl.endpoint.identification.algorithm"] = "none"  # Java's "off"
    out.update(rest)
    try:
        refuse_java_settings(out)
        check_kafka_settings(out, out, None, share_consumer=False)
    except OptionError as error:  # the source's wording names source options (kafka.X): name the file's settings
        message = (str(error).replace("option 'kafka.", f"{where}: setting '")
                   .replace("unknown Kafka setting 'kafka.", f"{where}: unknown setting '").replace("kafka.", ""))
        for target, source in origins.items():
            message = message.replace(f"setting '{target}'", f"setting '{source}' (librdkafka's {target})")
        raise OptionError(message) from None
    return out


def _translate_jaas(jaas: str, out: dict[str, str], where: str) -> str:
    """A JAAS login module line as librdkafka settings; returns the module. Values are never quoted back."""
    match = _JAAS.match(jaas)
    if match is None:
        raise OptionError(f"{where}: setting 'sasl.jaas.config' is not one login module line "
                          "(<LoginModule class> required name=\"value\" ...;); its value is not shown")
    module, options = match["module"], match["options"]
    known = _JAAS_OPTIONS.get(module)
    if known is None:
        raise OptionError(f"{where}: setting 'sasl.jaas.config' uses the login module {module}, which librdkafka "
                          f"has no equivalent of; supported: {', '.join(sorted(_JAAS_OPTIONS))}")
    at = 0
    for option in _JAAS_OPTION.finditer(options):
        if options[at:option.start()].strip():
            break
        at = option.end()
        name = option["name"]
        if name not in known:
            raise OptionError(f"{where}: setting 'sasl.jaas.config': option {name} of {module} has no librdkafka "
                              f"equivalent; supported: {', '.join(known)}")
        setting = known[name]
        if setting is not None:
            out[setting] = unescape_java(option["quoted"]) if option["quoted"] is not None else option["bare"]
    if options[at:].strip():
        raise OptionError(f"{where}: setting 'sasl.jaas.config' has text after its options that is not "
                          "name=\"value\" (its value is not shown)")
    return module


def _translate_stores(rest: dict[str, str], out: dict[str, str], where: str) -> None:
    """Java's trust and key stores as librdkafka's PEM and PKCS#12 settings; JKS is refused, naming the setting."""
    trust_type = rest.pop("ssl.truststore.type", None)
    trust = rest.pop("ssl.truststore.location", None)
    trust_password = rest.pop("ssl.truststore.password", None)
    if "ssl.truststore.certificates" in rest:
        out["ssl.ca.pem"] = rest.pop("ssl.truststore.certificates")
    if trust is not None:
        kind = (trust_type or ("PEM" if trust.lower().endswith((".pem", ".crt", ".cer")) else "JKS")).upper()
        if kind != "PEM":
            raise OptionError(
                f"{where}: setting 'ssl.truststore.location' is a {kind} truststore (ssl.truststore.type "
                f"{'=' + kind if trust_type else 'unset: JKS'}), which librdkafka cannot read: export its CA "
                "certificate as PEM (keytool -exportcert -rfc -keystore truststore.jks -alias <ca> -file ca.pem) and "
                "set ssl.truststore.type=PEM with ssl.truststore.location=ca.pem (Kafka's tools read that too), or "
                "librdkafka's ssl.ca.location=ca.pem")
        out["ssl.ca.location"] = trust  # a PEM truststore has no password: trust_password is not needed
    del trust_password
    key_type = rest.pop("ssl.keystore.type", None)
    keystore = rest.pop("ssl.keystore.location", None)
    key_password = rest.pop("ssl.keystore.password", None)
    if "ssl.keystore.certificate.chain" in rest:
        out["ssl.certificate.pem"] = rest.pop("ssl.keystore.certificate.chain")
    if "ssl.keystore.key" in rest:
        out["ssl.key.pem"] = rest.pop("ssl.keystore.key")
    if keystore is None:
        return
    kind = (key_type or ("PKCS12" if keystore.lower().endswith((".p12", ".pfx")) else
                         "PEM" if keystore.lower().endswith(".pem") else "JKS")).upper()
    if kind == "PKCS12":
        out["ssl.keystore.location"] = keystore
        if key_password is not None:
            out["ssl.keystore.password"] = key_password
    elif kind == "PEM":  # one file with the certificate chain and the private key (ssl.key.password decrypts it)
        out["ssl.certificate.location"] = keystore
        out["ssl.key.location"] = keystore
    else:
        raise OptionError(
            f"{where}: setting 'ssl.keystore.location' is a {kind} keystore, which librdkafka cannot read: convert "
            "it to PKCS#12 (keytool -importkeystore -srckeystore keystore.jks -destkeystore client.p12 "
            "-deststoretype PKCS12) and set ssl.keystore.type=PKCS12, or give PEM files (ssl.certificate.location, "
            "ssl.key.location)")


def unescape_java(text: str) -> str:
    """``text`` with Java's backslash escapes resolved (``\\uXXXX``, ``\\t``, ``\\=`` ...), as a properties file and
    a JAAS line's quoted values write them."""
    return _ESCAPE.sub(lambda m: chr(int(m[1][1:], 16)) if len(m[1]) == 5 else _ESCAPED.get(m[1], m[1]), text)
