"""A model's files: built from an architecture and exported to each framework, or read from what
a user has, and kept in the object store, sha256-verified.

    manager.py            the asset manager: an asset built, downloaded or taken in place once,
                          stored under ``models/<name>/<version>/<framework>/``, verified on load
    architectures.py      the networks the zoo builds locally (seeded weights), by builder name
    digits.py             the digits data set (its split in ``data/``) and the CNN trained on it
    transformer_models.py transformers built from their configurations
    keras_models.py       Keras models for the TensorFlow artifacts
    gluon_models.py       Gluon networks and their parameters for the MXNet artifacts
    exporters.py          one exporter a framework: the artifact written from the torch module
    formats.py            which format a user's artifact is in, which frameworks load it
    signatures.py         what an artifact takes and gives, read from the artifact
    file_models.py        a manifest for a user's artifact (its signature and what the user said)
    torch_files.py        a user's torch artifact as a module
    packing.py            an artifact as the bytes of an upload, and back
    model_store.py        models users add to the store: artifact, ``asset.json``, manifest
    keys.py               every store key of a model (``models/``, ``manifests/``)
    optional_imports.py,  frameworks imported without the packages they load only because they
    transformers_import.py  are installed
"""
