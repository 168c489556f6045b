{
  "targets": [
    {
      "target_name": "faxloop",
      "sources": ["faxloop.c"],
      "cflags": ["-O2", "-Wall", "-Wno-unused-parameter"],
      "libraries": ["-lspandsp", "-ltiff"],
      "defines": ["NAPI_VERSION=8"]
    },
    {
      "target_name": "faxmedia",
      "sources": ["faxmedia.c", "udptl.c"],
      "cflags": ["-O2", "-Wall", "-Wno-unused-parameter", "-pthread"],
      "libraries": ["-lspandsp", "-ltiff", "-lpthread"],
      "defines": ["NAPI_VERSION=8"]
    }
  ]
}
