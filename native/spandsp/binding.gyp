{
  "targets": [
    {
      "target_name": "faxloop",
      "sources": ["faxloop.c"],
      "cflags": ["-O2", "-Wall", "-Wno-unused-parameter"],
      "libraries": ["-lspandsp", "-ltiff"],
      "defines": ["NAPI_VERSION=8"]
    }
  ]
}
